package s3

// Credentials come from the AWS SDK for Go v2's config loader, not from
// minio-go's own chain. minio-go (v7.4.1) reads the environment, the shared
// files (with credential_process and SSO) and its IAM provider (web
// identity, container, instance metadata), but not role_arn with
// source_profile (an assume-role profile fell back to anonymous access and
// failed with "Access Denied"), nor AWS_EC2_METADATA_SERVICE_ENDPOINT. The
// SDK's loader is the chain of the AWS CLI itself, profile keys and
// precedence included, and its CredentialsCache refreshes before expiry.
// Only the credentials are taken from it: requests are still minio-go's.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials/ec2rolecreds"
	"github.com/aws/aws-sdk-go-v2/credentials/endpointcreds"
	"github.com/aws/aws-sdk-go-v2/credentials/processcreds"
	"github.com/aws/aws-sdk-go-v2/credentials/ssocreds"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go/logging"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// refreshBefore is how long before their expiry credentials are fetched
// again: the instance metadata service has new ones at least five minutes
// before the old expire, and a GET signed just before the expiry must
// still be valid when its last retry reaches the server.
const refreshBefore = 5 * time.Minute

// noCredentials is the remedy printed when the chain found nothing.
const noCredentials = "no AWS credentials were found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN); " +
	"or AWS_PROFILE naming a profile of ~/.aws/credentials or ~/.aws/config (AWS_SHARED_CREDENTIALS_FILE, AWS_CONFIG_FILE) " +
	"with keys, credential_process, sso_session or role_arn with source_profile; " +
	"or AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN; or AWS_CONTAINER_CREDENTIALS_FULL_URI; " +
	"on EC2 the instance profile is read from the instance metadata service (AWS_EC2_METADATA_SERVICE_ENDPOINT)"

// sdkCredentials gives minio-go the credentials of an AWS SDK provider.
// It says they are always expired, so that minio-go asks for them before
// every request and the SDK's CredentialsCache alone decides when to
// fetch new ones (an atomic load while they are fresh).
//
// A refresh that fails while the current credentials are still valid (the
// cache asks refreshBefore early) keeps them, with a warning, and tries
// again after retryRefresh: a credentials service that hiccups at the
// refresh gives no EIO.
//
// Credentials that live refreshBefore or less when fetched (an STS that
// issues them until a short-lived web identity token expires) are expired
// in the cache's eyes from the start, and it would fetch new ones for
// every request: they are kept for half their life instead.
type sdkCredentials struct {
	provider aws.CredentialsProvider
	from     string // where they come from, for errors
	timeout  time.Duration
	early    time.Duration // how much earlier than their expiry the cache's Expires is
	log      *slog.Logger

	mu        sync.Mutex
	last      aws.Credentials // the last ones fetched
	validTo   time.Time       // when last really expire (zero: never)
	margin    time.Duration   // how long before validTo last are no longer used
	next      time.Time       // for short-lived ones, when to fetch again (zero: ask the cache every time)
	failedAt  time.Time       // of the last failed refresh, while last are kept
	failedErr error
}

// retryRefresh is how long a failed refresh is not tried again while the
// current credentials are kept.
const retryRefresh = 10 * time.Second

var _ credentials.Provider = (*sdkCredentials)(nil)

func (p *sdkCredentials) RetrieveWithCredContext(*credentials.CredContext) (credentials.Value, error) {
	return p.Retrieve()
}

func (p *sdkCredentials) Retrieve() (credentials.Value, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	// Valid for a minute more at least (a quarter of their life if that
	// is shorter): a GET signed now may wait for its connection and be
	// retried.
	usable := p.last.HasKeys() && (p.validTo.IsZero() || now.Add(p.margin).Before(p.validTo))
	if usable && (now.Before(p.next) || (!p.failedAt.IsZero() && now.Sub(p.failedAt) < retryRefresh)) {
		return value(p.last), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	c, err := p.provider.Retrieve(ctx)
	if err != nil {
		err = fmt.Errorf("credentials from %s: %w", p.from, unwrapCache(err))
		if !usable {
			return credentials.Value{}, err
		}
		if p.failedAt.IsZero() || err.Error() != p.failedErr.Error() {
			p.log.Warn("refreshing the credentials failed: the current ones are used until they expire; retried every "+retryRefresh.String(),
				"expires", p.validTo, "err", err)
		}
		p.failedAt, p.failedErr = now, err
		return value(p.last), nil
	}
	if !p.failedAt.IsZero() {
		p.log.Info("credentials refreshed from " + p.from)
		p.failedAt, p.failedErr = time.Time{}, nil
	}
	if !sameCredentials(c, p.last) { // new ones, not the cache's copy
		p.keepLocked(c, now)
	}
	return value(c), nil
}

// keepLocked makes c, fetched at now, the credentials in use.
func (p *sdkCredentials) keepLocked(c aws.Credentials, now time.Time) {
	p.last, p.validTo, p.margin, p.next = c, time.Time{}, time.Minute, time.Time{}
	if c.CanExpire {
		p.validTo = c.Expires.Add(p.early)
		if life := p.validTo.Sub(now); life <= refreshBefore {
			p.margin, p.next = min(time.Minute, life/4), now.Add(life/2)
		}
	}
}

func sameCredentials(a, b aws.Credentials) bool {
	return a.AccessKeyID == b.AccessKeyID && a.SecretAccessKey == b.SecretAccessKey && a.SessionToken == b.SessionToken &&
		a.CanExpire == b.CanExpire && a.Expires.Equal(b.Expires)
}

func value(c aws.Credentials) credentials.Value {
	v := credentials.Value{AccessKeyID: c.AccessKeyID, SecretAccessKey: c.SecretAccessKey, SessionToken: c.SessionToken, SignerType: credentials.SignatureV4}
	if c.CanExpire {
		v.Expiration = c.Expires
	}
	return v
}

func (p *sdkCredentials) IsExpired() bool { return true }

// origin is where the credentials in use come from.
type origin struct {
	// From names the source as the log line "credentials from: ..."
	// shows it, with what a user checks when it gives none (the file,
	// the role, the profile that holds the keys, the STS endpoint
	// asked); "none" when there is none.
	From string
	// Fix is what to check when a server refuses the credentials it
	// gave: the keys of the environment or of a profile, the role that
	// STS issued them for, the SSO login, ...
	Fix string
}

// chain is the credentials the AWS tools would use, and where they come
// from (From "none" if nowhere: requests are then anonymous, as public
// buckets allow, and none is the instance metadata service's answer). It
// fails if a source is configured but gives no credentials (a role that
// cannot be assumed, a missing token file, a bad profile).
func chain(ctx context.Context, region string, timeout time.Duration, log *slog.Logger) (creds *credentials.Credentials, from origin, none, err error) {
	cfg, profile, stsURL, err := loadConfig(ctx, region, log)
	if err != nil {
		return nil, origin{}, nil, err
	}
	from = credentialSource(cfg, profile, stsURL)
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	fetched := time.Now()
	got, err := cfg.Credentials.Retrieve(rctx)
	switch {
	case err != nil && aws.IsCredentialsProvider(cfg.Credentials, (*ec2rolecreds.Provider)(nil)) && os.Getenv("AWS_EC2_METADATA_SERVICE_ENDPOINT") == "":
		// The instance metadata service is the last resort of the
		// chain, asked when nothing else is configured: off EC2 it does
		// not answer, and that is "no credentials".
		anonymous := credentials.New(&credentials.Static{Value: credentials.Value{SignerType: credentials.SignatureAnonymous}})
		return anonymous, origin{From: "none"}, unwrapCache(err), nil
	case err != nil:
		return nil, from, nil, fmt.Errorf("credentials from %s: %w", from.From, unwrapCache(err))
	}
	if from.From == "" {
		from = staticKeys(got.Source == config.CredentialsSourceName, profile)
	}
	// The cache moves Expires refreshBefore earlier, but for the
	// instance metadata's credentials, which it leaves alone when they
	// expire within 15 minutes and extends itself when a refresh fails.
	early := refreshBefore
	if aws.IsCredentialsProvider(cfg.Credentials, (*ec2rolecreds.Provider)(nil)) {
		early = 0
	}
	// The ones just fetched are the first in use: short-lived ones would
	// be fetched again at once otherwise (the cache holds them expired).
	p := &sdkCredentials{provider: cfg.Credentials, from: from.From, timeout: timeout, early: early, log: log}
	p.keepLocked(got, fetched)
	return credentials.New(p), from, nil, nil
}

// loadConfig runs the SDK's config loader as the AWS tools would, and
// says which profile it read and where its STS calls go.
func loadConfig(ctx context.Context, region string, log *slog.Logger) (cfg aws.Config, profile, stsURL string, err error) {
	profile = profileName()
	opts := []func(*config.LoadOptions) error{
		// The SDK's own warnings (such as its fallback to IMDSv1) go
		// to corgifs's log, not to stderr in the SDK's format.
		config.WithLogger(logging.LoggerFunc(func(c logging.Classification, format string, v ...any) {
			log.Debug("AWS SDK: "+fmt.Sprintf(format, v...), "class", string(c))
		})),
		config.WithCredentialsCacheOptions(func(o *aws.CredentialsCacheOptions) { o.ExpiryWindow = refreshBefore }),
		// STS and SSO need a region; AWS_REGION or the profile's comes first.
		config.WithDefaultRegion("us-east-1"),
	}
	if region != "" {
		opts = append(opts, config.WithRegion(region))
	}
	stsURL = stsEndpoint(profile)
	if stsURL != "" {
		at := func(o *sts.Options) { o.BaseEndpoint = aws.String(stsURL) }
		// The loader applies these options twice: once to an empty
		// Options (where a web identity client set would be used as is,
		// wrapping no client), then to the provider's, whose Client is
		// the STS client to wrap, once.
		opts = append(opts,
			config.WithAssumeRoleCredentialOptions(func(o *stscreds.AssumeRoleOptions) {
				if _, wrapped := o.Client.(stsAt); o.Client != nil && !wrapped {
					o.Client = stsAt{role: o.Client, at: at}
				}
			}),
			config.WithWebIdentityRoleCredentialOptions(func(o *stscreds.WebIdentityRoleOptions) {
				if _, wrapped := o.Client.(stsAt); o.Client != nil && !wrapped {
					o.Client = stsAt{identity: o.Client, at: at}
				}
			}))
	}
	cfg, err = config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return cfg, profile, "", fmt.Errorf("AWS configuration of profile %q (%s, %s): %w", profile, configFile(), credentialsFile(), err)
	}
	if stsURL == "" {
		stsURL = "https://sts." + cfg.Region + ".amazonaws.com" // the SDK's regional default
	}
	return cfg, profile, stsURL, nil
}

// staticKeys is the origin of keys read as they are: from the
// environment, else from the shared profile.
func staticKeys(env bool, profile string) origin {
	if env {
		return origin{From: "environment",
			Fix: "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (temporary keys need their AWS_SESSION_TOKEN too), or unset them to use a profile (AWS_PROFILE)"}
	}
	return origin{From: "shared profile " + profile,
		Fix: "check aws_access_key_id and aws_secret_access_key (temporary keys need their aws_session_token too) of profile " + profile +
			" in " + credentialsFile() + " or " + configFile() + ", or name another profile with AWS_PROFILE"}
}

// stsAt is an STS client whose calls go to another endpoint.
type stsAt struct {
	role     stscreds.AssumeRoleAPIClient
	identity stscreds.AssumeRoleWithWebIdentityAPIClient
	at       func(*sts.Options)
}

func (c stsAt) AssumeRole(ctx context.Context, in *sts.AssumeRoleInput, opts ...func(*sts.Options)) (*sts.AssumeRoleOutput, error) {
	return c.role.AssumeRole(ctx, in, append(opts, c.at)...)
}

func (c stsAt) AssumeRoleWithWebIdentity(ctx context.Context, in *sts.AssumeRoleWithWebIdentityInput, opts ...func(*sts.Options)) (*sts.AssumeRoleWithWebIdentityOutput, error) {
	return c.identity.AssumeRoleWithWebIdentity(ctx, in, append(opts, c.at)...)
}

// stsEndpoint is where the role and web identity providers send their STS
// calls, in the AWS tools' order: AWS_ENDPOINT_URL_STS, AWS_ENDPOINT_URL,
// the sts endpoint_url of the profile's services section, the profile's
// endpoint_url; "" for AWS's own. corgifs gives it to the SDK itself: its
// loader builds the providers' STS clients before it reads the general
// endpoints, and skips the services section when AWS_ENDPOINT_URL is set
// even if empty. The AWS CLI sends STS calls to the general endpoint too,
// which is where MinIO serves its STS.
func stsEndpoint(name string) string {
	p := readProfile(configFile(), name)
	return firstSet(os.Getenv("AWS_ENDPOINT_URL_STS"), os.Getenv("AWS_ENDPOINT_URL"),
		serviceEndpoint(configFile(), p.Services, "sts"), p.Endpoint)
}

// credentialSource is where the provider the SDK chose gets credentials
// (origin), or the zero origin for static keys (the environment or a
// profile: the Source of the keys says which, staticKeys).
func credentialSource(cfg aws.Config, profile, stsURL string) origin {
	var sc config.SharedConfig
	for _, s := range cfg.ConfigSources {
		if c, ok := s.(config.SharedConfig); ok {
			sc = c
			break
		}
	}
	// Credentials an STS issued for a role are refused when the role may
	// not read the bucket, or when the S3 server does not trust that STS
	// (another account, another server): new keys in the environment are
	// no fix.
	role := func(arn string) string {
		return "the temporary credentials STS at " + stsURL + " issued for role " + arn + " were refused: check that the role may read the bucket " +
			"(its permissions policy) and that the S3 endpoint trusts that STS (the same account, or for MinIO its own STS)"
	}
	is := func(target aws.CredentialsProvider) bool { return aws.IsCredentialsProvider(cfg.Credentials, target) }
	switch {
	case is((*stscreds.WebIdentityRoleProvider)(nil)):
		if f := os.Getenv("AWS_WEB_IDENTITY_TOKEN_FILE"); f != "" {
			arn := os.Getenv("AWS_ROLE_ARN")
			return origin{From: "web identity (AWS_WEB_IDENTITY_TOKEN_FILE " + f + ", AWS_ROLE_ARN " + arn + "; STS at " + stsURL + ")", Fix: role(arn)}
		}
		return origin{From: "web identity (web_identity_token_file " + sc.WebIdentityTokenFile + ", role_arn " + sc.RoleARN + " of shared profile " + profile + "; STS at " + stsURL + ")",
			Fix: role(sc.RoleARN)}
	case is((*stscreds.AssumeRoleProvider)(nil)):
		keys := "source_profile " + sc.SourceProfileName
		if sc.SourceProfileName == "" {
			keys = "credential_source " + sc.CredentialSource
		}
		return origin{From: "assume role " + sc.RoleARN + " (role_arn of shared profile " + profile + ", " + keys + "; STS at " + stsURL + ")",
			Fix: role(sc.RoleARN)}
	case is((*endpointcreds.Provider)(nil)):
		u := os.Getenv("AWS_CONTAINER_CREDENTIALS_FULL_URI")
		if u == "" {
			u = "169.254.170.2" + os.Getenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
		}
		return origin{From: "container (" + u + ")",
			Fix: "the container credentials service at " + u + " gave credentials that were refused: check that the task role (ECS) or pod identity (EKS) may read the bucket"}
	case is((*ec2rolecreds.Provider)(nil)):
		e := os.Getenv("AWS_EC2_METADATA_SERVICE_ENDPOINT")
		if e == "" {
			e = "http://169.254.169.254"
		}
		return origin{From: "instance metadata (" + e + ")",
			Fix: "the instance metadata service at " + e + " gave credentials that were refused: check that the instance profile's role may read the bucket"}
	case is((*processcreds.Provider)(nil)):
		return origin{From: "credential_process of shared profile " + profile,
			Fix: "check the keys that credential_process of profile " + profile + " in " + configFile() + " prints (AccessKeyId, SecretAccessKey, SessionToken)"}
	case is((*ssocreds.Provider)(nil)):
		of := "sso_start_url " + sc.SSOStartURL
		if sc.SSOSessionName != "" {
			of = "sso_session " + sc.SSOSessionName
		}
		return origin{From: "SSO cache of shared profile " + profile + " (" + of + ")",
			Fix: "the SSO role " + sc.SSORoleName + " of account " + sc.SSOAccountID + " (sso_role_name, sso_account_id of profile " + profile +
				") gave credentials that were refused: check that it may read the bucket, or log in again (aws sso login --profile " + profile + ")"}
	}
	return origin{}
}

// unwrapCache drops the CredentialsCache's "failed to refresh cached
// credentials" wrapping, which says nothing to a user.
func unwrapCache(err error) error {
	if u := errors.Unwrap(err); u != nil && strings.HasPrefix(err.Error(), "failed to refresh cached credentials") {
		return u
	}
	return err
}

// credentialsFile is the shared credentials file:
// AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials.
func credentialsFile() string {
	if f := os.Getenv("AWS_SHARED_CREDENTIALS_FILE"); f != "" {
		return f
	}
	return "~/.aws/credentials"
}
