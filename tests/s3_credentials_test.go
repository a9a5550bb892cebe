package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Without AWS_ACCESS_KEY_ID and its kin in the environment, corgifs finds
// credentials, the endpoint and the region where the AWS tools do: the
// profile AWS_PROFILE of the shared credentials file and of the shared
// config file ([profile NAME], with endpoint_url and region), or
// AWS_ENDPOINT_URL.
func TestS3CredentialsEndpointAndRegionComeFromTheAWSProfileOrTheEnvironment(t *testing.T) {
	s := startS3(t)
	s.upload("data", "chain", genSynthetic(t, 200, 8, 2, 2, "clustered"))
	keys := fmt.Sprintf("aws_access_key_id = %s\naws_secret_access_key = %s\n", s3Access, s3Secret)
	for _, c := range []struct {
		name, credentials, config string
		env                       map[string]string
	}{
		{"credentials file, endpoint and region from the config profile",
			"[default]\naws_access_key_id = wrong\naws_secret_access_key = wrong\n\n[other]\n" + keys,
			fmt.Sprintf("[default]\nendpoint_url = http://127.0.0.1:1\n\n[profile other]\nregion = us-east-1\nendpoint_url = %s\n", s.endpoint),
			nil},
		{"keys in the config profile, AWS_ENDPOINT_URL",
			"",
			"[profile other]\nregion = us-east-1\n" + keys,
			map[string]string{"AWS_ENDPOINT_URL": s.endpoint}},
	} {
		t.Run(c.name, func(t *testing.T) {
			home := t.TempDir()
			t.Setenv("HOME", home)
			for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"} {
				t.Setenv(k, "")
			}
			t.Setenv("AWS_PROFILE", "other")
			creds, config := filepath.Join(home, "credentials"), filepath.Join(home, "config")
			t.Setenv("AWS_SHARED_CREDENTIALS_FILE", creds)
			t.Setenv("AWS_CONFIG_FILE", config)
			if err := os.WriteFile(creds, []byte(c.credentials), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(config, []byte(c.config), 0o600); err != nil {
				t.Fatal(err)
			}
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			out := corgifs(t, "index", "s3://data/chain", "--cache-dir", t.TempDir())
			if summaryField(out, "files") != "2" {
				t.Fatalf("index found no 2 files:\n%s", out)
			}
		})
	}
}
