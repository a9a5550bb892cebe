package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corgifs/corgifs/internal/testenv"
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

// metadataMock is the AWS EC2 metadata emulator (amazon-ec2-metadata-mock)
// on a free port of 127.0.0.1, serving instance-profile credentials with
// the given keys and expiry. They have no session token: versitygw
// refuses any token it did not issue.
type metadataMock struct {
	url string // http://127.0.0.1:port
}

// metadataRole is the instance profile's role name the emulator serves.
const metadataRole = "corgifs-role"

func startMetadataMock(t *testing.T, access, secret string, expires time.Time) *metadataMock {
	t.Helper()
	aemm, err := exec.LookPath("ec2-metadata-mock")
	if err != nil {
		testenv.Missing(t, "no ec2-metadata-mock on PATH (go install github.com/aws/amazon-ec2-metadata-mock/cmd/ec2-metadata-mock@v1.13.0)")
	}
	dir := t.TempDir()
	conf := map[string]any{"metadata": map[string]any{
		"values": map[string]any{
			"iam-security-credentials-role": metadataRole,
			"iam-security-credentials": map[string]any{"Code": "Success", "LastUpdated": time.Now().UTC().Format(time.RFC3339), "Type": "AWS-HMAC",
				"AccessKeyId": access, "SecretAccessKey": secret, "Token": "", "Expiration": expires.UTC().Format(time.RFC3339)},
		},
		"paths": map[string]any{"iam-security-credentials": "/latest/meta-data/iam/security-credentials/" + metadataRole},
	}}
	b, err := json.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "aemm.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	var log syncBuffer
	cmd := exec.Command(aemm, "-c", filepath.Join(dir, "aemm.json"), "-n", "127.0.0.1", "-p", port)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "HOME="+dir)
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	m := &metadataMock{url: "http://127.0.0.1:" + port}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r, err := http.Get(m.url + "/latest/meta-data/iam/security-credentials/" + metadataRole)
		if err == nil {
			body, _ := io.ReadAll(r.Body)
			r.Body.Close()
			if r.StatusCode == http.StatusOK && strings.Contains(string(body), access) {
				return m
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("ec2-metadata-mock did not serve the credentials: %v\n%s", err, log.String())
		}
	}
}

// noAWSCredentials empties every source of AWS credentials the chain
// reads: the environment and the shared files (HOME is a new directory).
func noAWSCredentials(t *testing.T) {
	t.Helper()
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(home, "credentials"))
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(home, "config"))
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ROLE_ARN",
		"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
		"AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_EC2_METADATA_SERVICE_ENDPOINT", "AWS_EC2_METADATA_DISABLED"} {
		t.Setenv(k, "")
	}
}

// corgifsResult runs the binary to completion and returns its exit error
// and its stdout and stderr together.
func corgifsResult(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// On EC2, with nothing in the environment or the shared files, the
// credentials are the instance profile's, from the instance metadata
// service at AWS_EC2_METADATA_SERVICE_ENDPOINT, and the log says so.
func TestS3CredentialsComeFromTheInstanceMetadataServiceWhenNothingElseIsSet(t *testing.T) {
	s := startS3(t)
	s.upload("data", "imds", genSynthetic(t, 200, 8, 2, 2, "clustered"))
	md := startMetadataMock(t, s3Access, s3Secret, time.Now().Add(6*time.Hour))
	noAWSCredentials(t)
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", md.url)
	out, err := corgifsResult(t, "index", "s3://data/imds", "--s3-endpoint", s.endpoint, "--cache-dir", t.TempDir())
	if err != nil {
		t.Fatalf("index: %v\n%s", err, out)
	}
	if summaryField(out, "files") != "2" {
		t.Fatalf("index found no 2 files:\n%s", out)
	}
	if !strings.Contains(out, "credentials from: instance metadata ("+md.url+")") {
		t.Fatalf("the output does not say the credentials came from the instance metadata service at %s:\n%s", md.url, out)
	}
}

// With no credentials anywhere (the instance metadata service off), a
// server that refuses anonymous access fails the command with a message
// that says none were found and where to put them, not that they were
// refused.
func TestS3WithNoCredentialsAnywhereTheErrorSaysNoneWereFoundAndWhereToSetThem(t *testing.T) {
	s := startS3(t)
	s.upload("data", "none", genSynthetic(t, 200, 8, 2, 1, "clustered"))
	noAWSCredentials(t)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	out, err := corgifsResult(t, "index", "s3://data/none", "--s3-endpoint", s.endpoint, "--cache-dir", t.TempDir())
	if err == nil {
		t.Fatalf("index without credentials succeeded:\n%s", out)
	}
	for _, want := range []string{"refused anonymous access", "no AWS credentials were found", "AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the error does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "credentials were refused") {
		t.Fatalf("the error says credentials were refused when there were none:\n%s", out)
	}
}

// keyGET is a GET the S3 server was sent: when, and the access key that
// signed it.
type keyGET struct {
	at  time.Time
	key string
}

// The keys the credentials service hands out after the first: those of a
// second versitygw user, so that the S3 server's side tells which
// credentials signed each GET.
const (
	rotatedAccess = "corgifs-rotated-access"
	rotatedSecret = "corgifs-rotated-secret-key"
)

// signedBy is the access key of a SigV4 Authorization header.
var signedBy = regexp.MustCompile(`Credential=([^/]+)/`)

// Container credentials (AWS_CONTAINER_CREDENTIALS_FULL_URI, served here
// by the metadata emulator) that expire are fetched again before they
// expire, mid-epoch, and the reads go on: no EIO, the same bytes as a
// local mount. The credentials service rotates keys as ECS does: its
// first answer (versitygw's root keys, expiring in 5m20s) comes from one
// emulator, later answers (a second user's keys, expiring in 2h) from
// another. The cache refreshes 5 minutes early, at 20s; the service is
// down from then until 25s, so the first keys, still valid, are kept, and
// the refresh is tried again 10s later and gets the second keys: the S3
// server sees GETs signed with the first keys until ~31s, and after that
// only with the second.
func TestS3ExpiringContainerCredentialsAreRefreshedEarlyMidEpochAndKeptThroughAFailedRefreshWithoutEIO(t *testing.T) {
	t.Setenv("VGW_IAM_DIR", t.TempDir()) // versitygw's own users, for the second keys
	s := startS3(t)
	if out, err := exec.Command(s.gw, "admin", "--access", s3Access, "--secret", s3Secret, "--endpoint-url", s.endpoint,
		"create-user", "--access", rotatedAccess, "--secret", rotatedSecret, "--role", "admin").CombinedOutput(); err != nil {
		t.Fatalf("versitygw admin create-user: %v\n%s", err, out)
	}
	src := genSynthetic(t, 4000, 16, 4, 2, "clustered")
	s.upload("data", "expiring", src)
	t0 := time.Now()
	refresh := t0.Add(20 * time.Second)
	first := startMetadataMock(t, s3Access, s3Secret, refresh.Add(5*time.Minute))
	rotated := startMetadataMock(t, rotatedAccess, rotatedSecret, t0.Add(2*time.Hour))
	var mu sync.Mutex
	var fetches []time.Time
	credsPath := "/latest/meta-data/iam/security-credentials/" + metadataRole
	service := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		fetches = append(fetches, time.Now())
		target := rotated.url
		if len(fetches) == 1 {
			target = first.url
		}
		mu.Unlock()
		if target == rotated.url && time.Now().Before(refresh.Add(5*time.Second)) {
			http.Error(w, "down for the test", http.StatusServiceUnavailable)
			return
		}
		u, _ := url.Parse(target)
		httputil.NewSingleHostReverseProxy(u).ServeHTTP(w, r)
	}))
	t.Cleanup(service.Close)
	var gets []keyGET
	u, _ := url.Parse(s.endpoint)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if m := signedBy.FindStringSubmatch(r.Header.Get("Authorization")); r.Method == http.MethodGet && m != nil {
			mu.Lock()
			gets = append(gets, keyGET{time.Now(), m[1]})
			mu.Unlock()
		}
		httputil.NewSingleHostReverseProxy(u).ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)

	noAWSCredentials(t)
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", service.URL+credsPath)
	flags := []string{"--seed", "5", "--block-size", "16KiB", "--prefetch", "0", "--buffer", "5%"}
	m := startMount(t, "s3://data/expiring", append(flags, "--s3-endpoint", front.URL, "--cache-dir", t.TempDir())...)
	if log, ok := m.logHas("credentials from: container (" + service.URL + credsPath + ")"); !ok {
		t.Fatalf("the log does not name the container credentials:\n%s", log)
	}
	if time.Now().After(refresh.Add(-5 * time.Second)) {
		t.Fatalf("the mount took %v, too close to the refresh at 20s for this test's timing", time.Since(t0))
	}
	local := startMount(t, src, flags...)
	want := local.read(0, 0, 1)

	// Epoch 0: the first quarter before the refresh, the rest after it.
	f, err := os.Open(m.part(0, 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(f, got[:len(got)/4]); err != nil {
		t.Fatalf("epoch 0 before the refresh: %v\n%s", err, m.log)
	}
	time.Sleep(time.Until(refresh.Add(time.Second)))
	if n, err := io.ReadFull(f, got[len(got)/4:]); err != nil {
		t.Fatalf("epoch 0 after the refresh, at byte %d: %v\n%s", len(got)/4+n, err, m.log)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("epoch 0 read across the credentials' refresh differs from a local mount")
	}
	if !bytes.Equal(m.read(1, 0, 1), local.read(1, 0, 1)) {
		t.Fatal("epoch 1 after the failed refresh differs from a local mount")
	}
	if log, ok := m.logHas("refreshing the credentials failed", "container ("+service.URL); !ok {
		t.Fatalf("the log does not say the refresh from the container credentials failed:\n%s", log)
	}
	retried := refresh.Add(5 * time.Second) // the service is up again; the retry comes 10s after the failure
	time.Sleep(time.Until(refresh.Add(12 * time.Second)))
	if !bytes.Equal(m.read(2, 0, 1), local.read(2, 0, 1)) {
		t.Fatal("epoch 2 after the credentials' refresh differs from a local mount")
	}

	mu.Lock()
	defer mu.Unlock()
	// One fetch per expiry plus the SDK's tries while the service is
	// down, not one per request: the cache holds them.
	if len(fetches) < 3 || len(fetches) > 8 {
		t.Fatalf("the credentials were fetched %d times (at %v) for %d GETs: want once at the mount, a failed refresh at 20s, one more after 25s", len(fetches), sinceAll(t0, fetches), len(gets))
	}
	var before, kept, after int
	for _, g := range gets {
		switch {
		case g.key == s3Access && g.at.Before(refresh):
			before++
		case g.key == s3Access && g.at.Before(refresh.Add(12*time.Second)):
			kept++
		case g.key == rotatedAccess && !g.at.Before(retried):
			after++
		default:
			t.Fatalf("a GET at %v signed with key %q (refresh at 20s, failing until 25s)", g.at.Sub(t0), g.key)
		}
	}
	if before == 0 || kept == 0 || after == 0 {
		t.Fatalf("GETs signed with the first keys before the refresh: %d, kept after it failed: %d, with the refreshed keys: %d; want all", before, kept, after)
	}
	t.Logf("credentials fetched at %v; GETs with the first keys %d, kept after the failed refresh %d, with the refreshed keys %d", sinceAll(t0, fetches), before, kept, after)
}

func sinceAll(t0 time.Time, ts []time.Time) []time.Duration {
	var d []time.Duration
	for _, t := range ts {
		d = append(d, t.Sub(t0).Round(time.Millisecond))
	}
	return d
}
