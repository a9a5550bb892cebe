package s3

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/minio/minio-go/v7"
)

// isolate empties every source of AWS credentials and writes the shared
// config file; it returns its directory.
func isolate(t *testing.T, config string) string {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ROLE_ARN",
		"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
		"AWS_EC2_METADATA_SERVICE_ENDPOINT", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_STS", "AWS_REGION", "AWS_DEFAULT_REGION"} {
		t.Setenv(k, "")
	}
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	if err := os.WriteFile(filepath.Join(dir, "config"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "http://" + l.Addr().String()
}

// Each kind of source the chain finds is named, as the mount's log line
// "credentials from: ..." shows it, and the keys reach minio-go.
func TestChainNamesWhereTheCredentialsComeFrom(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)

	t.Run("environment", func(t *testing.T) {
		isolate(t, "")
		t.Setenv("AWS_ACCESS_KEY_ID", "env-key")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
		creds, from, none, err := chain(ctx, "", time.Second, log)
		if err != nil || none != nil || from.From != "environment" {
			t.Fatalf("from %q, none %v, err %v", from, none, err)
		}
		if v, err := creds.GetWithContext(nil); err != nil || v.AccessKeyID != "env-key" || v.SecretAccessKey != "env-secret" {
			t.Fatalf("keys %+v, %v", v, err)
		}
	})
	t.Run("credential_process", func(t *testing.T) {
		isolate(t, `[profile proc]
credential_process = /bin/echo '{"Version":1,"AccessKeyId":"proc-key","SecretAccessKey":"proc-secret","Expiration":"2099-01-01T00:00:00Z"}'
`)
		t.Setenv("AWS_PROFILE", "proc")
		creds, from, _, err := chain(ctx, "", 10*time.Second, log)
		if err != nil || from.From != "credential_process of shared profile proc" {
			t.Fatalf("from %q, err %v", from, err)
		}
		// They count as expired refreshBefore before their expiry.
		early := time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC).Add(-refreshBefore)
		if v, err := creds.GetWithContext(nil); err != nil || v.AccessKeyID != "proc-key" || !v.Expiration.Equal(early) {
			t.Fatalf("keys %+v, %v; want proc-key expiring at %v", v, err, early)
		}
	})
	t.Run("nothing", func(t *testing.T) {
		isolate(t, "")
		creds, from, none, err := chain(ctx, "", time.Second, log)
		if err != nil || none == nil || from.From != "none" {
			t.Fatalf("from %q, none %v, err %v", from, none, err)
		}
		if v, _ := creds.GetWithContext(nil); v.AccessKeyID != "" {
			t.Fatalf("keys %+v, want anonymous", v)
		}
	})
}

// A configured source that gives no credentials is an error naming the
// source and what a user checks (the profile, the file, the role, the STS
// endpoint asked), not anonymous access: an assume-role profile whose STS
// cannot be reached is not taken for "no credentials", as minio-go's chain
// did.
func TestAConfiguredSourceThatGivesNoCredentialsIsAnErrorNamingIt(t *testing.T) {
	for _, c := range []struct {
		name, config string
		env          map[string]string // {dead}: a loopback address nothing listens on; {token}: a token file
		want         string
	}{
		{"assume role with source_profile", `[profile base]
aws_access_key_id = base-key
aws_secret_access_key = base-secret

[profile role]
role_arn = arn:aws:iam::123456789012:role/reader
source_profile = base
`, map[string]string{"AWS_PROFILE": "role", "AWS_ENDPOINT_URL_STS": "{dead}"},
			"credentials from assume role arn:aws:iam::123456789012:role/reader (role_arn of shared profile role, source_profile base; STS at {dead})"},
		{"assume role, STS at the profile's endpoint_url", `[profile base]
aws_access_key_id = base-key
aws_secret_access_key = base-secret

[profile role]
role_arn = arn:aws:iam::123456789012:role/reader
source_profile = base
endpoint_url = {dead}
`, map[string]string{"AWS_PROFILE": "role"},
			"credentials from assume role arn:aws:iam::123456789012:role/reader (role_arn of shared profile role, source_profile base; STS at {dead})"},
		{"assume role, STS at the services section's sts endpoint_url over the profile's", `[profile base]
aws_access_key_id = base-key
aws_secret_access_key = base-secret

[profile role]
role_arn = arn:aws:iam::123456789012:role/reader
source_profile = base
endpoint_url = http://127.0.0.1:1
services = local

[services local]
sts =
  endpoint_url = {dead}
`, map[string]string{"AWS_PROFILE": "role"},
			"(role_arn of shared profile role, source_profile base; STS at {dead})"},
		{"web identity from the environment, STS at AWS_ENDPOINT_URL", "",
			map[string]string{"AWS_WEB_IDENTITY_TOKEN_FILE": "{token}", "AWS_ROLE_ARN": "arn:aws:iam::123456789012:role/trainer", "AWS_ENDPOINT_URL": "{dead}"},
			"credentials from web identity (AWS_WEB_IDENTITY_TOKEN_FILE {token}, AWS_ROLE_ARN arn:aws:iam::123456789012:role/trainer; STS at {dead}): "},
		{"web identity with no token file", "",
			map[string]string{"AWS_WEB_IDENTITY_TOKEN_FILE": "/nonexistent/token", "AWS_ROLE_ARN": "arn:aws:iam::123456789012:role/trainer"},
			"credentials from web identity (AWS_WEB_IDENTITY_TOKEN_FILE /nonexistent/token, AWS_ROLE_ARN arn:aws:iam::123456789012:role/trainer; STS at https://sts.us-east-1.amazonaws.com): "},
		{"web identity from a profile", `[profile eks]
web_identity_token_file = {token}
role_arn = arn:aws:iam::123456789012:role/trainer
`, map[string]string{"AWS_PROFILE": "eks", "AWS_ENDPOINT_URL_STS": "{dead}"},
			"credentials from web identity (web_identity_token_file {token}, role_arn arn:aws:iam::123456789012:role/trainer of shared profile eks; STS at {dead}): "},
		{"credential_process", `[profile proc]
credential_process = /bin/false
`, map[string]string{"AWS_PROFILE": "proc"},
			"credentials from credential_process of shared profile proc: "},
		{"SSO with no cached token", `[profile dev]
sso_session = corp
sso_account_id = 123456789012
sso_role_name = reader

[sso-session corp]
sso_region = us-east-1
sso_start_url = https://corp.awsapps.com/start
`, map[string]string{"AWS_PROFILE": "dev"},
			"credentials from SSO cache of shared profile dev (sso_session corp): "},
		{"container", "", map[string]string{"AWS_CONTAINER_CREDENTIALS_FULL_URI": "{dead}/creds"},
			"credentials from container ({dead}/creds): "},
		{"instance metadata at a set endpoint", "", map[string]string{"AWS_EC2_METADATA_SERVICE_ENDPOINT": "{dead}", "AWS_EC2_METADATA_DISABLED": ""},
			"credentials from instance metadata ({dead}): "},
	} {
		t.Run(c.name, func(t *testing.T) {
			dead := deadAddr(t)
			token := filepath.Join(t.TempDir(), "token")
			if err := os.WriteFile(token, []byte("a.b.c"), 0o600); err != nil {
				t.Fatal(err)
			}
			r := strings.NewReplacer("{dead}", dead, "{token}", token)
			isolate(t, r.Replace(c.config))
			for k, v := range c.env {
				t.Setenv(k, r.Replace(v))
			}
			want := r.Replace(c.want)
			_, from, none, err := chain(context.Background(), "us-east-1", 10*time.Second, slog.New(slog.DiscardHandler))
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("from %q, none %v, err %v: want an error with %q", from, none, err, want)
			}
			// The calls went where the message says.
			if strings.Contains(c.want, "STS at {dead}") && !strings.Contains(err.Error(), `Post "`+dead+`/"`) {
				t.Fatalf("err %v: the STS call did not go to %s", err, dead)
			}
		})
	}
}

// A profile named by AWS_PROFILE that no file has is an error naming it
// and the files, not anonymous access.
func TestAMissingProfileIsAnErrorNamingItAndTheFiles(t *testing.T) {
	dir := isolate(t, "[profile other]\nregion = us-east-1\n")
	t.Setenv("AWS_PROFILE", "absent")
	_, _, _, err := chain(context.Background(), "", time.Second, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), `profile "absent"`) || !strings.Contains(err.Error(), filepath.Join(dir, "config")) {
		t.Fatalf("err %v: want one naming the profile and the config file", err)
	}
}

// A refresh that fails while the credentials are still valid keeps them
// (the cache asks refreshBefore early), and is not tried again before
// retryRefresh; once they are really expired the failure is the error,
// naming the source.
func TestAFailedRefreshKeepsCredentialsThatAreStillValidThenFailsNamingTheSource(t *testing.T) {
	var calls int
	fail := false
	var expires time.Time
	p := &sdkCredentials{
		provider: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			calls++
			if fail {
				return aws.Credentials{}, errors.New("service down")
			}
			return aws.Credentials{AccessKeyID: "k", SecretAccessKey: "s", CanExpire: true, Expires: expires}, nil
		}),
		from: "container (test)", timeout: time.Second, early: refreshBefore, log: slog.New(slog.DiscardHandler),
	}
	// As the cache hands them out when they are due for a refresh in a
	// second: really valid for refreshBefore more (this provider, unlike
	// the cache, fetches new ones on every call).
	expires = time.Now().Add(time.Second)
	if v, err := p.Retrieve(); err != nil || v.AccessKeyID != "k" {
		t.Fatalf("first: %+v, %v", v, err)
	}
	fail = true
	if v, err := p.Retrieve(); err != nil || v.AccessKeyID != "k" {
		t.Fatalf("failed refresh of valid credentials: %+v, %v; want them kept", v, err)
	}
	if v, err := p.Retrieve(); err != nil || v.AccessKeyID != "k" || calls != 2 {
		t.Fatalf("right after a failed refresh: %+v, %v, %d calls; want them kept without a call", v, err, calls)
	}
	// Really expired: nothing to keep.
	p.validTo, p.failedAt = expires, time.Time{}
	if _, err := p.Retrieve(); err == nil || !strings.Contains(err.Error(), "credentials from container (test): service down") {
		t.Fatalf("failed refresh of expired credentials: %v; want an error naming the source", err)
	}
}

// Credentials that live less than the cache's refresh window when fetched
// (the cache holds them expired from the start) are not fetched again for
// every request, but kept for half their life.
func TestCredentialsShorterLivedThanTheRefreshWindowAreFetchedAgainAtHalfTheirLife(t *testing.T) {
	var calls int
	p := &sdkCredentials{
		provider: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			calls++
			// As the cache hands them out: Expires moved refreshBefore
			// earlier, so already past; really valid for 2 s.
			return aws.Credentials{AccessKeyID: fmt.Sprint("k", calls), SecretAccessKey: "s", CanExpire: true,
				Expires: time.Now().Add(2*time.Second - refreshBefore)}, nil
		}),
		from: "web identity (test)", timeout: time.Second, early: refreshBefore, log: slog.New(slog.DiscardHandler),
	}
	for range 3 {
		if v, err := p.Retrieve(); err != nil || v.AccessKeyID != "k1" || calls != 1 {
			t.Fatalf("within half their life: %+v, %v, %d calls; want k1 from one call", v, err, calls)
		}
	}
	time.Sleep(1100 * time.Millisecond)
	if v, err := p.Retrieve(); err != nil || v.AccessKeyID != "k2" || calls != 2 {
		t.Fatalf("after half their life: %+v, %v, %d calls; want k2 from a second call", v, err, calls)
	}
}

// When a server refuses the credentials, the error says what to check for
// the source they came from: the keys for keys from the environment or a
// profile; the role, and whether the server trusts its STS, for
// credentials STS issued (assume role, web identity); the SSO role and a
// new login for the SSO cache; and never new environment keys or
// AWS_PROFILE where those are no fix.
func TestRefusedCredentialsSayWhatToCheckForTheirSource(t *testing.T) {
	for _, c := range []struct {
		name, config string
		env          map[string]string
		want         []string
		static       bool // keys read as they are: the chain gets them offline
	}{
		{"environment", "", map[string]string{"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"},
			[]string{"they came from environment;", "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"}, true},
		{"shared profile", "[profile dev]\naws_access_key_id = k\naws_secret_access_key = s\n", map[string]string{"AWS_PROFILE": "dev"},
			[]string{"they came from shared profile dev;", "check aws_access_key_id and aws_secret_access_key", "of profile dev in "}, true},
		{"assume role", "[profile base]\naws_access_key_id = k\naws_secret_access_key = s\n\n[profile role]\nrole_arn = arn:aws:iam::1:role/reader\nsource_profile = base\n",
			map[string]string{"AWS_PROFILE": "role", "AWS_ENDPOINT_URL_STS": "http://127.0.0.1:9000"},
			[]string{"they came from assume role arn:aws:iam::1:role/reader", "STS at http://127.0.0.1:9000 issued for role arn:aws:iam::1:role/reader were refused",
				"may read the bucket", "trusts that STS"}, false},
		{"web identity", "", map[string]string{"AWS_WEB_IDENTITY_TOKEN_FILE": "/run/token", "AWS_ROLE_ARN": "arn:aws:iam::1:role/trainer"},
			[]string{"they came from web identity (AWS_WEB_IDENTITY_TOKEN_FILE /run/token", "issued for role arn:aws:iam::1:role/trainer were refused", "trusts that STS"}, false},
		{"SSO cache", "[profile dev]\nsso_session = corp\nsso_account_id = 123456789012\nsso_role_name = reader\n\n[sso-session corp]\nsso_region = us-east-1\nsso_start_url = https://corp.awsapps.com/start\n",
			map[string]string{"AWS_PROFILE": "dev"},
			[]string{"they came from SSO cache of shared profile dev", "the SSO role reader of account 123456789012", "aws sso login --profile dev"}, false},
		{"credential_process", "[profile proc]\ncredential_process = /bin/false\n", map[string]string{"AWS_PROFILE": "proc"},
			[]string{"check the keys that credential_process of profile proc"}, false},
		{"container", "", map[string]string{"AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://127.0.0.1:1/creds"},
			[]string{"container credentials service at http://127.0.0.1:1/creds", "task role"}, false},
		{"instance metadata", "", map[string]string{"AWS_EC2_METADATA_SERVICE_ENDPOINT": "http://127.0.0.1:1", "AWS_EC2_METADATA_DISABLED": ""},
			[]string{"instance metadata service at http://127.0.0.1:1", "instance profile's role"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			isolate(t, c.config)
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			log := slog.New(slog.DiscardHandler)
			var from origin
			if c.static {
				_, o, none, err := chain(context.Background(), "us-east-1", time.Second, log)
				if err != nil || none != nil {
					t.Fatalf("chain: %v, none %v", err, none)
				}
				from = o
			} else {
				// The other sources need their service to give
				// credentials; the origin is known before they are asked.
				cfg, profile, stsURL, err := loadConfig(context.Background(), "us-east-1", log)
				if err != nil {
					t.Fatal(err)
				}
				from = credentialSource(cfg, profile, stsURL)
			}
			s := &Source{bucket: "data", prefix: "set/", endpoint: "http://127.0.0.1:9000", credsFrom: from}
			for _, refused := range []minio.ErrorResponse{
				{StatusCode: 403, Code: "InvalidAccessKeyId", Message: "The Access Key Id you provided does not exist in our records."},
				{StatusCode: 403}, // a HEAD's answer has no body
			} {
				msg := s.explain(refused).Error()
				for _, w := range c.want[1:] {
					if !strings.Contains(msg, w) {
						t.Errorf("%s: %q lacks %q", refused.Code, msg, w)
					}
				}
				if refused.Code != "" && !strings.Contains(msg, c.want[0]) {
					t.Errorf("%q lacks %q", msg, c.want[0])
				}
				if c.name != "environment" && strings.Contains(msg, "AWS_ACCESS_KEY_ID") {
					t.Errorf("%q suggests environment keys for credentials from %s", msg, from.From)
				}
				if c.name != "environment" && c.name != "shared profile" && strings.Contains(msg, "AWS_PROFILE") {
					t.Errorf("%q suggests AWS_PROFILE for credentials from %s", msg, from.From)
				}
			}
		})
	}
}
