package tests

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"
)

// stsFront is a reverse proxy in front of MinIO that notes who signed
// what: the access key of every S3 request and whether it carried a
// session token, and every STS call with its signer, its web identity
// token and the access key MinIO issued. expiry, when set, is the
// Expiration the client is told for the n-th AssumeRole answer (zero:
// MinIO's own), so that a test sees a refresh sooner than MinIO's
// shortest role session (900 s) would allow.
type stsFront struct {
	url string

	mu       sync.Mutex
	requests []signedRequest
	calls    []stsCall
	expiry   func(n int) time.Time
}

type signedRequest struct {
	at    time.Time
	what  string // method and path
	key   string // the access key of its signature
	token bool   // whether it carried X-Amz-Security-Token
}

type stsCall struct {
	at             time.Time
	action, signer string
	token          string // WebIdentityToken
	issued         string // the AccessKeyId of the answer
}

type stsFormKey struct{}

var (
	issuedKey  = regexp.MustCompile(`<AccessKeyId>([^<]+)</AccessKeyId>`)
	expiration = regexp.MustCompile(`<Expiration>[^<]+</Expiration>`)
)

func startSTSFront(t *testing.T, target string) *stsFront {
	t.Helper()
	f := &stsFront{}
	u, _ := url.Parse(target)
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.ModifyResponse = func(resp *http.Response) error {
		form, ok := resp.Request.Context().Value(stsFormKey{}).(url.Values)
		if !ok {
			return nil
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		call := stsCall{at: time.Now(), action: form.Get("Action"), token: form.Get("WebIdentityToken")}
		if m := signedBy.FindStringSubmatch(resp.Request.Header.Get("Authorization")); m != nil {
			call.signer = m[1]
		}
		if m := issuedKey.FindSubmatch(body); m != nil {
			call.issued = string(m[1])
		}
		f.mu.Lock()
		n := 0
		for _, c := range f.calls {
			if c.action == call.action {
				n++
			}
		}
		f.calls = append(f.calls, call)
		if f.expiry != nil && call.action == "AssumeRole" {
			if at := f.expiry(n); !at.IsZero() {
				body = expiration.ReplaceAll(body, []byte("<Expiration>"+at.UTC().Format(time.RFC3339)+"</Expiration>"))
			}
		}
		f.mu.Unlock()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		resp.ContentLength = int64(len(body))
		resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
		return nil
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/" {
			// An STS call: its form is in the body.
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			form, _ := url.ParseQuery(string(body))
			r.Body = io.NopCloser(bytes.NewReader(body))
			r = r.WithContext(context.WithValue(r.Context(), stsFormKey{}, form))
		} else {
			req := signedRequest{at: time.Now(), what: r.Method + " " + r.URL.Path, token: r.Header.Get("X-Amz-Security-Token") != ""}
			if m := signedBy.FindStringSubmatch(r.Header.Get("Authorization")); m != nil {
				req.key = m[1]
			}
			f.mu.Lock()
			f.requests = append(f.requests, req)
			f.mu.Unlock()
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

// issued is the STS calls of action, in order.
func (f *stsFront) issued(action string) []stsCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var calls []stsCall
	for _, c := range f.calls {
		if c.action == action {
			calls = append(calls, c)
		}
	}
	return calls
}

// signedWith is the S3 requests signed with key.
func (f *stsFront) signedWith(key string) []signedRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	var rs []signedRequest
	for _, r := range f.requests {
		if r.key == key {
			rs = append(rs, r)
		}
	}
	return rs
}

// stsRole is the role the tests assume: MinIO takes any ARN-shaped role in
// AssumeRole (the credentials get the policy of the keys that sign it), and
// ignores one it does not know in AssumeRoleWithWebIdentity with a
// claim-based provider (the token's "policy" claim decides).
const stsRole = "arn:aws:iam::123456789012:role/trainer"

// writeFileAtomic replaces name's content at once, as the kubelet replaces
// a projected token: a reader never sees half of it.
func writeFileAtomic(t *testing.T, name, content string) {
	t.Helper()
	tmp := name + ".new"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, name); err != nil {
		t.Fatal(err)
	}
}

// assumeRoleProfile writes the shared files of a profile "trainer" that
// assumes stsRole with the keys of the profile "source" (MinIO's root
// user's, or others), its STS and S3 at endpoint, and selects it.
func assumeRoleProfile(t *testing.T, endpoint, access, secret string) {
	t.Helper()
	noAWSCredentials(t)
	for _, k := range []string{"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL_STS", "AWS_REGION", "AWS_DEFAULT_REGION"} {
		t.Setenv(k, "")
	}
	home := os.Getenv("HOME")
	if err := os.WriteFile(filepath.Join(home, "credentials"), []byte("[source]\naws_access_key_id = "+access+"\naws_secret_access_key = "+secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "config"), []byte("[profile trainer]\nrole_arn = "+stsRole+"\nsource_profile = source\n"+
		"region = us-east-1\nendpoint_url = "+endpoint+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_PROFILE", "trainer")
}

// webIdentity sets the environment of a pod with IRSA: a token file and a
// role, with its STS and S3 at endpoint (AWS_ENDPOINT_URL).
func webIdentity(t *testing.T, endpoint, token string) string {
	t.Helper()
	noAWSCredentials(t)
	for _, k := range []string{"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL_STS", "AWS_DEFAULT_REGION"} {
		t.Setenv(k, "")
	}
	file := filepath.Join(t.TempDir(), "token")
	writeFileAtomic(t, file, token)
	t.Setenv("AWS_WEB_IDENTITY_TOKEN_FILE", file)
	t.Setenv("AWS_ROLE_ARN", stsRole)
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ENDPOINT_URL", endpoint)
	return file
}

// stsRefreshAt is how long after the first mount's start the first
// AssumeRole credentials are due for a refresh (5 minutes before the
// expiry they are given): time for two mounts on a loaded machine.
// stsWebExpiry is when the first web identity credentials expire, as
// MinIO issues them (the token's expiry); they are due at half their life,
// about stsWebExpiry/2.
const (
	stsRefreshAt = 8 * time.Second
	stsWebExpiry = 14 * time.Second
)

// Credentials from MinIO's STS (assume role, web identity) and from the
// SSO cache sign every request, are refreshed before they expire, and
// their failures name their source. The subtests share one MinIO (it may
// take seconds to start on a loaded machine) whose STS trusts the tokens
// of a test OpenID provider.
func TestS3CredentialsFromAnSTSOrTheSSOCacheSignEveryRequestAreRefreshedAndTheirFailuresNameTheSource(t *testing.T) {
	op := startOpenIDProvider(t)
	mi := startMinIO(t, op.minioEnv()...)
	t.Run("assume-role and web identity credentials sign every request and are refreshed before expiry mid-epoch", func(t *testing.T) {
		assumeRoleAndWebIdentitySignEveryRequestAndAreRefreshedBeforeExpiryMidEpoch(t, op, mi)
	})
	t.Run("an STS refusal fails the command naming the role, the source and the STS endpoint", func(t *testing.T) {
		anSTSRefusalFailsTheCommandNamingTheRoleTheSourceAndTheSTS(t, mi)
	})
	t.Run("SSO cache credentials of a profile sign every request", func(t *testing.T) {
		ssoCacheCredentialsOfAProfileSignEveryRequest(t, mi)
	})
}

// assumeRoleAndWebIdentitySignEveryRequestAndAreRefreshedBeforeExpiryMidEpoch:
// two mounts of one MinIO bucket take their credentials from MinIO's STS:
// one from an assume-role profile (role_arn with source_profile holding
// MinIO's root keys, STS and S3 at the profile's endpoint_url), one from a
// web identity (AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN, a token
// signed by an OpenID provider MinIO trusts, STS and S3 at
// AWS_ENDPOINT_URL). Every S3 request is signed with the temporary keys
// the STS issued, session token included, never with the source keys; the
// AssumeRole calls are signed with the source profile's keys.
//
// An epoch read across each refresh gets the same bytes as a local mount,
// the reads after it are signed with new keys from a second STS call (one,
// not one per request), and no request is signed with the first keys once
// they were due. The AssumeRole keys are due 5 minutes before the expiry
// the proxy tells the client, at 8 s (MinIO's shortest role session is 15
// minutes). The web identity's expire for real at 14 s (MinIO issues them
// until the token's expiry), are due at half their life, and the next
// epoch is read after their expiry; the second web identity call carries
// the token the file holds then (rotated as the kubelet rotates it).
func assumeRoleAndWebIdentitySignEveryRequestAndAreRefreshedBeforeExpiryMidEpoch(t *testing.T, op *openIDProvider, mi *minioServer) {
	// 4 MB, so that three quarters of an epoch are more than the
	// kernel's 1 MiB readahead: the reads after the refresh need GETs.
	src := genSynthetic(t, 40000, 16, 4, 2, "clustered")
	mi.upload(t, "refresh", "sts", src)
	front := startSTSFront(t, mi.endpoint)
	flags := []string{"--seed", "5", "--block-size", "64KiB", "--prefetch", "0", "--buffer", "5%"}
	local := startMount(t, src, flags...)
	want := [][]byte{local.read(0, 0, 1), local.read(1, 0, 1)}

	t0 := time.Now()
	refresh := t0.Add(stsRefreshAt)
	front.mu.Lock()
	front.expiry = func(n int) time.Time {
		if n == 0 {
			return refresh.Add(5 * time.Minute)
		}
		return time.Time{}
	}
	front.mu.Unlock()
	assumeRoleProfile(t, front.url, minioRoot, minioRootSecret)
	role := startMount(t, "s3://refresh/sts", append(flags, "--cache-dir", t.TempDir())...)
	webExpiry := t0.Add(stsWebExpiry)
	token := op.token(t, "trainer", webExpiry)
	tokenFile := webIdentity(t, front.url, token)
	web := startMount(t, "s3://refresh/sts", append(flags, "--cache-dir", t.TempDir())...)
	for _, c := range []struct {
		m    *mount
		from string
	}{
		{role, "credentials from: assume role " + stsRole + " (role_arn of shared profile trainer, source_profile source; STS at " + front.url + ")"},
		{web, "credentials from: web identity (AWS_WEB_IDENTITY_TOKEN_FILE " + tokenFile + ", AWS_ROLE_ARN " + stsRole + "; STS at " + front.url + ")"},
	} {
		if log, ok := c.m.logHas(c.from); !ok {
			t.Fatalf("the log does not say %q:\n%s", c.from, log)
		}
	}
	if time.Now().After(refresh.Add(-3 * time.Second)) {
		t.Fatalf("MinIO and the mounts took %v, too close to the refresh at %v for this test's timing", time.Since(t0), stsRefreshAt)
	}

	// Epoch 0: the first quarter before the refresh, the rest after it.
	files := map[*mount]*os.File{}
	got := map[*mount][]byte{}
	for _, m := range []*mount{role, web} {
		f, err := os.Open(m.part(0, 0, 1))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		files[m], got[m] = f, make([]byte, len(want[0]))
		if _, err := io.ReadFull(f, got[m][:len(want[0])/4]); err != nil {
			t.Fatalf("epoch 0 before the refresh: %v\n%s", err, m.log)
		}
	}
	rotated := op.token(t, "trainer", t0.Add(time.Hour))
	writeFileAtomic(t, tokenFile, rotated)
	// The web identity's first keys are due at half their life.
	webCalls := front.issued("AssumeRoleWithWebIdentity")
	if len(webCalls) != 1 {
		t.Fatalf("%d web identity calls before its refresh, want 1", len(webCalls))
	}
	due := map[string]time.Time{"AssumeRole": refresh, "AssumeRoleWithWebIdentity": webCalls[0].at.Add(webExpiry.Sub(webCalls[0].at) / 2)}
	last := due["AssumeRole"]
	if due["AssumeRoleWithWebIdentity"].After(last) {
		last = due["AssumeRoleWithWebIdentity"]
	}
	time.Sleep(time.Until(last.Add(time.Second)))
	for _, m := range []*mount{role, web} {
		if n, err := io.ReadFull(files[m], got[m][len(want[0])/4:]); err != nil {
			t.Fatalf("epoch 0 after the refresh, at byte %d: %v\n%s", len(want[0])/4+n, err, m.log)
		}
		if !bytes.Equal(got[m], want[0]) {
			t.Fatalf("epoch 0 read across the credentials' refresh differs from a local mount\n%s", m.log)
		}
	}
	// Epoch 1 once the web identity's first keys have expired at MinIO.
	time.Sleep(time.Until(webExpiry.Add(time.Second)))
	epoch1 := time.Now()
	for _, m := range []*mount{role, web} {
		if !bytes.Equal(m.read(1, 0, 1), want[1]) {
			t.Fatalf("epoch 1 after the refresh differs from a local mount\n%s", m.log)
		}
	}

	for _, c := range []struct {
		action string
		signer string // of the STS calls ("" for web identity: unsigned)
		tokens []string
	}{
		{"AssumeRole", minioRoot, nil},
		{"AssumeRoleWithWebIdentity", "", []string{token, rotated}},
	} {
		calls := front.issued(c.action)
		// One call at the mount and one at the refresh, not one per
		// request: the SDK's cache holds them, and the web identity's,
		// which live less than the cache's 5 minutes, are held for half
		// their life.
		if len(calls) != 2 {
			t.Fatalf("%d %s calls (at %v), want 2: at the mount, at the refresh", len(calls), c.action, sinceAll(t0, callTimes(calls)))
		}
		for i, call := range calls {
			if call.signer != c.signer || call.issued == "" || (c.tokens != nil && call.token != c.tokens[i]) {
				t.Fatalf("%s call %d: signed by %q, issued %q, token %.20q…; want signed by %q, keys issued, the token the file held", c.action, i, call.signer, call.issued, call.token, c.signer)
			}
		}
		first, second := front.signedWith(calls[0].issued), front.signedWith(calls[1].issued)
		for _, r := range append(first, second...) {
			if !r.token {
				t.Fatalf("%s at %v signed with the STS keys but without their session token", r.what, r.at.Sub(t0))
			}
		}
		for _, r := range first {
			if !r.at.Before(due[c.action]) {
				t.Fatalf("%s at %v signed with the first %s keys, after their refresh was due at %v", r.what, r.at.Sub(t0), c.action, due[c.action].Sub(t0))
			}
		}
		if calls[1].at.Before(due[c.action]) {
			t.Fatalf("the second %s call at %v, before the first keys were due at %v", c.action, calls[1].at.Sub(t0), due[c.action].Sub(t0))
		}
		mid := 0
		for _, r := range second {
			if r.at.Before(epoch1) {
				mid++
			}
		}
		if len(first) == 0 || mid == 0 {
			t.Fatalf("S3 requests signed with the first %s keys: %d, with the refreshed ones in epoch 0: %d; want both", c.action, len(first), mid)
		}
		t.Logf("%s: calls at %v; S3 requests with the first keys %d, with the refreshed keys %d (%d in epoch 0)", c.action, sinceAll(t0, callTimes(calls)), len(first), len(second), mid)
	}
	front.mu.Lock()
	defer front.mu.Unlock()
	for _, r := range front.requests {
		if r.key == minioRoot || r.key == "" {
			t.Fatalf("%s at %v signed with %q, not with STS credentials", r.what, r.at.Sub(t0), r.key)
		}
	}
}

func callTimes(calls []stsCall) []time.Time {
	var ts []time.Time
	for _, c := range calls {
		ts = append(ts, c.at)
	}
	return ts
}

// anSTSRefusalFailsTheCommandNamingTheRoleTheSourceAndTheSTS: when
// MinIO's STS refuses, the command fails naming the credentials'
// source, the role and the STS endpoint, with the STS's answer: for an
// assume-role profile whose source keys MinIO does not know, and for a web
// identity token signed by a key its OpenID provider does not have.
func anSTSRefusalFailsTheCommandNamingTheRoleTheSourceAndTheSTS(t *testing.T, mi *minioServer) {
	mi.upload(t, "refused", "set", genSynthetic(t, 200, 8, 2, 1, "clustered"))

	assumeRoleProfile(t, mi.endpoint, "corgifs-unknown-user", "corgifs-unknown-secret")
	out, err := corgifsResult(t, "index", "s3://refused/set", "--cache-dir", t.TempDir())
	for _, want := range []string{"credentials from assume role " + stsRole + " (role_arn of shared profile trainer, source_profile source; STS at " + mi.endpoint + ")",
		"AssumeRole", "403"} {
		if err == nil || !strings.Contains(out, want) {
			t.Fatalf("index with unknown source keys: %v; the output does not say %q:\n%s", err, want, out)
		}
	}

	stranger := startOpenIDProvider(t) // its key is not the one MinIO trusts
	file := webIdentity(t, mi.endpoint, stranger.token(t, "trainer", time.Now().Add(time.Hour)))
	out, err = corgifsResult(t, "index", "s3://refused/set", "--cache-dir", t.TempDir())
	for _, want := range []string{"credentials from web identity (AWS_WEB_IDENTITY_TOKEN_FILE " + file + ", AWS_ROLE_ARN " + stsRole + "; STS at " + mi.endpoint + ")",
		"AssumeRoleWithWebIdentity", "400"} {
		if err == nil || !strings.Contains(out, want) {
			t.Fatalf("index with a token MinIO does not trust: %v; the output does not say %q:\n%s", err, want, out)
		}
	}
}

// ssoCacheCredentialsOfAProfileSignEveryRequest: the SSO path of a
// profile (sso_session with sso_account_id and sso_role_name, as
// `aws sso login` leaves it): the SDK reads the access
// token from the SSO cache (~/.aws/sso/cache) and asks the SSO portal for
// the role's credentials. AWS's portal is not on 127.0.0.1: the test's
// stand-in (AWS_ENDPOINT_URL_SSO) answers GetRoleCredentials, as the SDK
// shapes it, with temporary credentials it gets from MinIO's STS. A mount
// of the profile names the SSO cache, the portal is asked once with the
// cached token, and every S3 request is signed with the role's keys.
func ssoCacheCredentialsOfAProfileSignEveryRequest(t *testing.T, mi *minioServer) {
	src := genSynthetic(t, 400, 8, 2, 2, "clustered")
	mi.upload(t, "sso", "set", src)
	front := startSTSFront(t, mi.endpoint)
	const cached = "corgifs-sso-access-token"
	var mu sync.Mutex
	var asked []string
	portal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		mu.Lock()
		asked = append(asked, r.Header.Get("X-Amz-Sso_bearer_token"))
		mu.Unlock()
		if r.URL.Path != "/federation/credentials" || q.Get("account_id") != "123456789012" || q.Get("role_name") != "reader" || r.Header.Get("X-Amz-Sso_bearer_token") != cached {
			http.Error(w, `{"message":"not the cached token, account and role"}`, http.StatusUnauthorized)
			return
		}
		creds, err := credentials.NewSTSAssumeRole(front.url, credentials.STSAssumeRoleOptions{AccessKey: minioRoot, SecretKey: minioRootSecret, DurationSeconds: 900})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		v, err := creds.GetWithContext(nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"roleCredentials": map[string]any{"accessKeyId": v.AccessKeyID, "secretAccessKey": v.SecretAccessKey,
			"sessionToken": v.SessionToken, "expiration": v.Expiration.UnixMilli()}})
	}))
	t.Cleanup(portal.Close)

	noAWSCredentials(t)
	for _, k := range []string{"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION"} {
		t.Setenv(k, "")
	}
	home := os.Getenv("HOME")
	if err := os.WriteFile(filepath.Join(home, "config"), []byte("[profile dev]\nsso_session = corp\nsso_account_id = 123456789012\nsso_role_name = reader\n"+
		"region = us-east-1\nendpoint_url = "+front.url+"\n\n[sso-session corp]\nsso_region = us-east-1\nsso_start_url = https://corp.awsapps.com/start\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The cache file of `aws sso login`: named by the SHA-1 of the session's name.
	cache := filepath.Join(home, ".aws", "sso", "cache")
	if err := os.MkdirAll(cache, 0o700); err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum([]byte("corp"))
	token, _ := json.Marshal(map[string]string{"accessToken": cached, "expiresAt": time.Now().Add(8 * time.Hour).UTC().Format(time.RFC3339),
		"region": "us-east-1", "startUrl": "https://corp.awsapps.com/start"})
	if err := os.WriteFile(filepath.Join(cache, hex.EncodeToString(sum[:])+".json"), token, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_PROFILE", "dev")
	t.Setenv("AWS_ENDPOINT_URL_SSO", portal.URL)

	flags := []string{"--seed", "5", "--block-size", "16KiB"}
	m := startMount(t, "s3://sso/set", append(flags, "--cache-dir", t.TempDir())...)
	if log, ok := m.logHas("credentials from: SSO cache of shared profile dev (sso_session corp)"); !ok {
		t.Fatalf("the log does not name the SSO cache:\n%s", log)
	}
	if !bytes.Equal(m.read(0, 0, 1), startMount(t, src, flags...).read(0, 0, 1)) {
		t.Fatal("epoch 0 differs from a local mount")
	}
	mu.Lock()
	defer mu.Unlock()
	roles := front.issued("AssumeRole")
	if len(asked) != 1 || asked[0] != cached || len(roles) != 1 {
		t.Fatalf("the portal was asked %d times (tokens %q), and gave %d credentials: want once, with the cached token", len(asked), asked, len(roles))
	}
	signed := front.signedWith(roles[0].issued)
	front.mu.Lock()
	defer front.mu.Unlock()
	if len(signed) == 0 || len(signed) != len(front.requests) {
		t.Fatalf("%d of %d S3 requests signed with the role's keys from the portal: want all", len(signed), len(front.requests))
	}
	for _, r := range signed {
		if !r.token {
			t.Fatalf("%s signed with the role's keys but without their session token", r.what)
		}
	}
}
