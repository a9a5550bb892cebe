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
// file as optional too. Indented lines belong to a nested setting (such as
// "s3 =" with its own keys) and are not the profile's own.
func readProfile(path, name string) profile {
	var p profile
	if path == "" {
		return p
	}
	f, err := os.Open(path)
	if err != nil {
		return p
	}
	defer f.Close()
	want := "profile " + name
	if name == "default" {
		want = "default"
	}
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		raw := sc.Text()
		line := strings.TrimSpace(raw)
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
			continue
		case line[0] == '[':
			section := strings.Join(strings.Fields(strings.Trim(line, "[]")), " ")
			in = section == want || (name == "default" && section == "profile default")
			continue
		case !in || raw[0] == ' ' || raw[0] == '\t':
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		switch value = strings.TrimSpace(value); strings.TrimSpace(key) {
		case "region":
			p.Region = value
		case "endpoint_url":
			p.Endpoint = value
		}
	}
	return p
}
