package tests

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/corgifs/corgifs/internal/testenv"
)

// The STS tests run MinIO on 127.0.0.1, for its STS: versitygw has none.
// .ci/run installs it.

const (
	minioRoot       = "corgifs-minio-root"
	minioRootSecret = "corgifs-minio-root-secret"
)

// minioServer is a MinIO server serving a fresh directory.
type minioServer struct {
	endpoint string // http://127.0.0.1:port
	client   *minio.Client
	log      syncBuffer
}

// startMinIO starts MinIO on a free port of 127.0.0.1, with the root user
// minioRoot and the extra environment env (its MINIO_* settings), and
// waits until it answers. It is stopped at the end of the test. Nothing of
// the test's own environment is changed: each test says where corgifs
// finds its credentials.
func startMinIO(t *testing.T, env ...string) *minioServer {
	t.Helper()
	fuseOK(t)
	server, err := exec.LookPath("minio")
	if err != nil {
		testenv.Missing(t, "no minio on PATH (go install github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c)")
	}
	dir := t.TempDir()
	addr := freeAddr(t)
	m := &minioServer{endpoint: "http://" + addr}
	m.client, err = minio.New(addr, &minio.Options{Creds: credentials.NewStaticV4(minioRoot, minioRootSecret, ""), BucketLookup: minio.BucketLookupPath})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	// No console (MINIO_BROWSER=off), no update check; HOME is where it
	// keeps its certificates directory.
	cmd := exec.Command(server, "server", "--address", addr, "--quiet", filepath.Join(dir, "data"))
	cmd.Env = append(os.Environ(), "HOME="+dir, "MINIO_ROOT_USER="+minioRoot, "MINIO_ROOT_PASSWORD="+minioRootSecret,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off")
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = &m.log, &m.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := m.client.ListBuckets(context.Background()); err == nil {
			return m
		} else if time.Now().After(deadline) {
			t.Fatalf("minio did not answer: %v\n%s", err, m.log.String())
		}
	}
}

// upload creates bucket and puts every file of dir under prefix, for t
// (a subtest of the one that started the server).
func (m *minioServer) upload(t *testing.T, bucket, prefix, dir string) {
	t.Helper()
	(&s3Server{t: t, client: m.client}).upload(bucket, prefix, dir)
}

// freeAddr is a free host:port of 127.0.0.1.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// openIDProvider is the part of an OpenID Connect provider that MinIO's
// STS asks: its discovery document and its signing keys (JWKS). It signs
// the ID tokens a test hands to corgifs, as an EKS cluster's OIDC issuer
// signs the projected service-account tokens of its pods.
type openIDProvider struct {
	url string // the issuer
	key *rsa.PrivateKey
}

// openIDClient is the audience of the tokens, MinIO's client ID.
const openIDClient = "corgifs"

func startOpenIDProvider(t *testing.T) *openIDProvider {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	p := &openIDProvider{key: key}
	b64 := base64.RawURLEncoding.EncodeToString
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"issuer": p.url, "jwks_uri": p.url + "/jwks",
			"authorization_endpoint": p.url + "/authorize", "token_endpoint": p.url + "/token",
			"response_types_supported": []string{"id_token"}, "id_token_signing_alg_values_supported": []string{"RS256"}})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"keys": []any{map[string]string{"kty": "RSA", "kid": "corgifs-test", "alg": "RS256", "use": "sig",
			"n": b64(key.N.Bytes()), "e": b64(big.NewInt(int64(key.E)).Bytes())}}})
	})
	// The URL is known before the server serves: its handlers read it.
	srv := httptest.NewUnstartedServer(mux)
	p.url = "http://" + srv.Listener.Addr().String()
	srv.Start()
	t.Cleanup(srv.Close)
	return p
}

// minioEnv is the MinIO setting that trusts the provider's tokens; their
// "policy" claim names the MinIO policy of the credentials it issues.
func (p *openIDProvider) minioEnv() []string {
	return []string{"MINIO_IDENTITY_OPENID_CONFIG_URL=" + p.url + "/.well-known/openid-configuration",
		"MINIO_IDENTITY_OPENID_CLIENT_ID=" + openIDClient}
}

// token is an RS256 ID token for subject, expiring at exp, whose
// credentials get MinIO's canned policy "readwrite" (its "readonly" does
// not list buckets).
func (p *openIDProvider) token(t *testing.T, subject string, exp time.Time) string {
	t.Helper()
	b64 := base64.RawURLEncoding.EncodeToString
	header, _ := json.Marshal(map[string]string{"alg": "RS256", "kid": "corgifs-test", "typ": "JWT"})
	claims, _ := json.Marshal(map[string]any{"iss": p.url, "sub": subject, "aud": openIDClient,
		"iat": time.Now().Unix(), "exp": exp.Unix(), "policy": "readwrite"})
	signed := b64(header) + "." + b64(claims)
	sum := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(rand.Reader, p.key, crypto.SHA256, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return signed + "." + b64(sig)
}
