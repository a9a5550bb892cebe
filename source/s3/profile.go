package s3

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
)

// profile is what the shared config file says of one profile: the
// settings the AWS CLI and SDKs take from it when neither a flag nor the
// environment gives them.
type profile struct {
	Region   string // region
	Endpoint string // endpoint_url
	Services string // services: the [services NAME] section of per-service settings
}

// profileName is the profile in use: AWS_PROFILE, else "default".
func profileName() string {
	if p := os.Getenv("AWS_PROFILE"); p != "" {
		return p
	}
	return "default"
}

// configFile is the shared config file: AWS_CONFIG_FILE, else
// ~/.aws/config.
func configFile() string {
	if f := os.Getenv("AWS_CONFIG_FILE"); f != "" {
		return f
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".aws", "config")
}

// readProfile reads the profile name from the shared config file at path,
// whose sections are [default] and [profile NAME]. A missing or unreadable
// file, or no such profile, gives an empty profile: the AWS tools treat the
// file as optional too. Nested settings (such as "s3 =" with its own
// indented keys) are not the profile's own.
func readProfile(path, name string) profile {
	var p profile
	want := "profile " + name
	scanConfig(path, func(section, parent, key, value string) {
		if parent != "" || (section != want && (name != "default" || section != "default")) {
			return
		}
		switch key {
		case "region":
			p.Region = value
		case "endpoint_url":
			p.Endpoint = value
		case "services":
			p.Services = value
		}
	})
	return p
}

// serviceEndpoint is the endpoint_url nested under service (such as
// "sts") in the [services NAME] section of the shared config file at path,
// or "" if it has none.
func serviceEndpoint(path, services, service string) string {
	if services == "" {
		return ""
	}
	var url string
	scanConfig(path, func(section, parent, key, value string) {
		if section == "services "+services && parent == service && key == "endpoint_url" {
			url = value
		}
	})
	return url
}

// scanConfig calls fn with every "key = value" line of the shared config
// file at path, with the section it is in (its words joined by one space)
// and, for an indented line, the key of the unindented line above that it
// belongs to ("" otherwise). A missing file has no lines.
func scanConfig(path string, fn func(section, parent, key, value string)) {
	if path == "" {
		return
	}
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	var section, parent string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		raw := sc.Text()
		line := strings.TrimSpace(raw)
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
			continue
		case line[0] == '[':
			section, parent = strings.Join(strings.Fields(strings.Trim(line, "[]")), " "), ""
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		if raw[0] == ' ' || raw[0] == '\t' {
			fn(section, parent, key, value)
			continue
		}
		parent = ""
		if value == "" {
			parent = key // the head of nested settings
		}
		fn(section, "", key, value)
	}
}
