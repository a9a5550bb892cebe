package s3

import (
	"os"
	"path/filepath"
	"testing"
)

// The endpoint and region come from Config (the flags), else the
// environment, else the profile AWS_PROFILE (else default) of the shared
// config file AWS_CONFIG_FILE, as the AWS tools take them; another
// profile's settings and nested service settings are not taken.
func TestEndpointAndRegionComeFromTheFlagsTheEnvironmentThenTheConfigProfile(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(cfg, []byte(`[default]
region = us-west-1
endpoint_url = http://default.example:9000

# the profile in use
[profile  other]
region=eu-north-1
endpoint_url = http://other.example:9000
services = mine
s3 =
  endpoint_url = http://nested.example:1
  region = nested-1

[profile third]
region = ap-south-1
`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"} {
		t.Setenv(k, "")
	}
	t.Setenv("AWS_CONFIG_FILE", cfg)
	check := func(what string, c Config, endpoint, region string) {
		t.Helper()
		if e, r := c.settings(); e != endpoint || r != region {
			t.Errorf("%s: endpoint %q region %q, want %q %q", what, e, r, endpoint, region)
		}
	}
	check("default profile", Config{}, "http://default.example:9000", "us-west-1")
	t.Setenv("AWS_PROFILE", "other")
	check("AWS_PROFILE=other", Config{}, "http://other.example:9000", "eu-north-1")
	t.Setenv("AWS_PROFILE", "third")
	check("a profile with no endpoint_url", Config{}, "https://s3.amazonaws.com", "ap-south-1")
	t.Setenv("AWS_PROFILE", "missing")
	check("a profile the file does not have", Config{}, "https://s3.amazonaws.com", "")
	t.Setenv("AWS_PROFILE", "other")
	t.Setenv("AWS_ENDPOINT_URL", "http://env.example:1")
	t.Setenv("AWS_DEFAULT_REGION", "env-2")
	check("the environment over the profile", Config{}, "http://env.example:1", "env-2")
	t.Setenv("AWS_ENDPOINT_URL_S3", "http://env-s3.example:1")
	t.Setenv("AWS_REGION", "env-1")
	check("the S3-specific environment first", Config{}, "http://env-s3.example:1", "env-1")
	check("the flags over everything", Config{Endpoint: "http://flag.example:1", Region: "flag-1"}, "http://flag.example:1", "flag-1")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_ENDPOINT_URL_S3", "")
	t.Setenv("AWS_ENDPOINT_URL", "")
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	check("no config file", Config{}, "https://s3.amazonaws.com", "")
}
