package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// Errors a caller tells apart with errors.Is.
var (
	// ErrNotFound: no object under the key.
	ErrNotFound = errors.New("object not found")
	// ErrPrecondition: a conditional write lost (the object exists, or its
	// ETag is no longer the one named).
	ErrPrecondition = errors.New("object changed: precondition failed")
	// ErrInvalid: a malformed URL or key.
	ErrInvalid = errors.New("invalid object store argument")
)

// MaxObject bounds what Get reads into memory: a chunk is at most 512 KiB,
// a lease or a workspace's configuration a few KiB; litestream reads its
// own files through its own client.
const MaxObject = 64 << 20

// Config names a bucket and prefix on an S3-compatible endpoint.
type Config struct {
	Bucket   string
	Prefix   string // without leading or trailing slash; may be empty
	Endpoint string // empty: AWS's own endpoints for Region
	Region   string
	// PathStyle addresses the bucket in the path (endpoint/bucket/key), as
	// self-hosted servers need; on by default when Endpoint is set.
	PathStyle bool
}

// ParseURL reads s3://bucket/prefix?endpoint=URL&region=R[&path-style=false].
func ParseURL(raw string) (Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Config{}, fmt.Errorf("object store %q: %w: %v", raw, ErrInvalid, err)
	}
	if u.Scheme != "s3" {
		return Config{}, fmt.Errorf("object store %q: %w: the scheme must be s3://", raw, ErrInvalid)
	}
	if u.User != nil {
		return Config{}, fmt.Errorf("object store: %w: credentials do not go in the URL (use AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)", ErrInvalid)
	}
	c := Config{Bucket: u.Host, Prefix: strings.Trim(u.Path, "/")}
	if c.Bucket == "" {
		return Config{}, fmt.Errorf("object store %q: %w: no bucket", raw, ErrInvalid)
	}
	if c.Prefix != "" {
		if err := checkKey(c.Prefix); err != nil {
			return Config{}, fmt.Errorf("object store %q: prefix: %w", raw, err)
		}
	}
	q := u.Query()
	for k := range q {
		switch k {
		case "endpoint", "region", "path-style":
		default:
			return Config{}, fmt.Errorf("object store %q: %w: unknown parameter %q", raw, ErrInvalid, k)
		}
	}
	c.Endpoint, c.Region = q.Get("endpoint"), q.Get("region")
	if c.Endpoint != "" {
		e, err := url.Parse(c.Endpoint)
		if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" {
			return Config{}, fmt.Errorf("object store %q: %w: endpoint must be an http(s) URL", raw, ErrInvalid)
		}
		c.PathStyle = true
	}
	switch q.Get("path-style") {
	case "":
	case "true":
		c.PathStyle = true
	case "false":
		c.PathStyle = false
	default:
		return Config{}, fmt.Errorf("object store %q: %w: path-style is true or false", raw, ErrInvalid)
	}
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	return c, nil
}

// String is the URL the Config came from (no credentials are ever in it).
func (c Config) String() string {
	u := url.URL{Scheme: "s3", Host: c.Bucket, Path: "/" + c.Prefix}
	q := url.Values{}
	if c.Endpoint != "" {
		q.Set("endpoint", c.Endpoint)
	}
	q.Set("region", c.Region)
	u.RawQuery = q.Encode()
	return u.String()
}

// Store is a bucket and prefix. It is safe for concurrent use.
type Store struct {
	cfg    Config
	client *s3.Client
	creds  aws.CredentialsProvider
}

// Open builds a client for cfg with credentials from the environment. It
// does not touch the network; CheckConditional does.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Bucket == "" {
		return nil, fmt.Errorf("open object store: %w: no bucket", ErrInvalid)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	ac, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(cfg.Region))
	if err != nil {
		return nil, fmt.Errorf("open object store %s: %w", cfg, err)
	}
	client := s3.NewFromConfig(ac, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.UsePathStyle = cfg.PathStyle
		// Checksums only when an operation requires them: self-hosted
		// servers differ in the trailing checksums they accept.
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	return &Store{cfg: cfg, client: client, creds: ac.Credentials}, nil
}

// Config is what the store was opened with.
func (s *Store) Config() Config { return s.cfg }

// Credentials returns the access key pair the store signs with, for a
// library (litestream) that builds its own client. Never log them.
func (s *Store) Credentials(ctx context.Context) (id, secret string, err error) {
	if s.creds == nil {
		return "", "", nil
	}
	c, err := s.creds.Retrieve(ctx)
	if err != nil {
		return "", "", fmt.Errorf("object store credentials: %w", err)
	}
	return c.AccessKeyID, c.SecretAccessKey, nil
}

// Key is the full key of a key relative to the prefix.
func (s *Store) Key(key string) string {
	if s.cfg.Prefix == "" {
		return key
	}
	return s.cfg.Prefix + "/" + key
}

// checkKey refuses keys that could escape the prefix or confuse a
// file-backed server: empty segments, "." and "..", control bytes.
func checkKey(key string) error {
	if key == "" || len(key) > 900 {
		return fmt.Errorf("%w: key %q: empty or longer than 900 bytes", ErrInvalid, key)
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("%w: key %q: empty, . or .. segment", ErrInvalid, key)
		}
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] == 0x7f || key[i] == '\\' {
			return fmt.Errorf("%w: key %q: control byte or backslash", ErrInvalid, key)
		}
	}
	return nil
}

// Object describes a stored object.
type Object struct {
	Key      string // relative to the prefix
	Size     int64
	ETag     string
	Modified time.Time // the server's clock
}

// Get reads a whole object (at most MaxObject bytes).
func (s *Store) Get(ctx context.Context, key string) ([]byte, Object, error) {
	return s.GetMax(ctx, key, MaxObject)
}

// GetMax reads a whole object of at most max bytes (and MaxObject); a
// larger one is ErrInvalid, whatever the server sends.
func (s *Store) GetMax(ctx context.Context, key string, max int64) ([]byte, Object, error) {
	if err := checkKey(key); err != nil {
		return nil, Object{}, err
	}
	if max < 0 || max > MaxObject {
		max = MaxObject
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.cfg.Bucket, Key: aws.String(s.Key(key))})
	if err != nil {
		return nil, Object{}, s.wrap("get", key, err)
	}
	defer out.Body.Close()
	if out.ContentLength != nil && *out.ContentLength > max {
		return nil, Object{}, fmt.Errorf("object store get %s: %w: %d bytes, more than %d", key, ErrInvalid, *out.ContentLength, max)
	}
	b, err := io.ReadAll(io.LimitReader(out.Body, max+1))
	if err != nil {
		return nil, Object{}, s.wrap("get", key, err)
	}
	if int64(len(b)) > max {
		return nil, Object{}, fmt.Errorf("object store get %s: %w: more than %d bytes", key, ErrInvalid, max)
	}
	o := Object{Key: key, Size: int64(len(b)), ETag: aws.ToString(out.ETag)}
	if out.LastModified != nil {
		o.Modified = *out.LastModified
	}
	return b, o, nil
}

// Head describes an object without reading it.
func (s *Store) Head(ctx context.Context, key string) (Object, error) {
	if err := checkKey(key); err != nil {
		return Object{}, err
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.cfg.Bucket, Key: aws.String(s.Key(key))})
	if err != nil {
		return Object{}, s.wrap("head", key, err)
	}
	o := Object{Key: key, Size: aws.ToInt64(out.ContentLength), ETag: aws.ToString(out.ETag)}
	if out.LastModified != nil {
		o.Modified = *out.LastModified
	}
	return o, nil
}

// Put writes an object unconditionally and returns its ETag.
func (s *Store) Put(ctx context.Context, key string, data []byte) (string, error) {
	return s.put(ctx, key, data, nil, nil)
}

// PutIfAbsent writes an object only if none exists under the key;
// ErrPrecondition otherwise.
func (s *Store) PutIfAbsent(ctx context.Context, key string, data []byte) (string, error) {
	return s.put(ctx, key, data, nil, aws.String("*"))
}

// PutIfMatch replaces an object only if its ETag is still etag;
// ErrPrecondition otherwise (and ErrNotFound if it is gone, on servers
// that say so).
func (s *Store) PutIfMatch(ctx context.Context, key string, data []byte, etag string) (string, error) {
	if etag == "" {
		return "", fmt.Errorf("object store put %s: %w: empty etag", key, ErrInvalid)
	}
	return s.put(ctx, key, data, aws.String(etag), nil)
}

func (s *Store) put(ctx context.Context, key string, data []byte, ifMatch, ifNoneMatch *string) (string, error) {
	if err := checkKey(key); err != nil {
		return "", err
	}
	out, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        &s.cfg.Bucket,
		Key:           aws.String(s.Key(key)),
		Body:          bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))),
		IfMatch:       ifMatch,
		IfNoneMatch:   ifNoneMatch,
	})
	if err != nil {
		return "", s.wrap("put", key, err)
	}
	return aws.ToString(out.ETag), nil
}

// Delete removes an object; a missing one is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.cfg.Bucket, Key: aws.String(s.Key(key))})
	if err != nil && !errors.Is(s.wrap("delete", key, err), ErrNotFound) {
		return s.wrap("delete", key, err)
	}
	return nil
}

// List yields the objects whose keys start with prefix (relative to the
// store's prefix), in key order, a page of up to 1,000 at a time.
func (s *Store) List(ctx context.Context, prefix string) iter.Seq2[Object, error] {
	return func(yield func(Object, error) bool) {
		full := s.Key(prefix)
		if prefix == "" && s.cfg.Prefix != "" {
			full = s.cfg.Prefix + "/"
		}
		p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: &s.cfg.Bucket, Prefix: aws.String(full)})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				yield(Object{}, s.wrap("list", prefix, err))
				return
			}
			for _, o := range page.Contents {
				k := aws.ToString(o.Key)
				if s.cfg.Prefix != "" {
					k = strings.TrimPrefix(k, s.cfg.Prefix+"/")
				}
				obj := Object{Key: k, Size: aws.ToInt64(o.Size), ETag: aws.ToString(o.ETag)}
				if o.LastModified != nil {
					obj.Modified = *o.LastModified
				}
				if !yield(obj, nil) {
					return
				}
			}
		}
	}
}

// CheckConditional proves the store honours conditional writes (leases
// depend on them) with a scratch key under probe/: a second PutIfAbsent
// and a PutIfMatch with a stale ETag must both fail.
func (s *Store) CheckConditional(ctx context.Context, scratch string) error {
	key := "probe/" + scratch
	defer s.Delete(context.WithoutCancel(ctx), key)
	if err := s.Delete(ctx, key); err != nil {
		return err
	}
	etag, err := s.PutIfAbsent(ctx, key, []byte("1"))
	if err != nil {
		return fmt.Errorf("object store %s: conditional write probe: %w", s.cfg, err)
	}
	if _, err := s.PutIfAbsent(ctx, key, []byte("2")); !errors.Is(err, ErrPrecondition) {
		return fmt.Errorf("object store %s does not honour If-None-Match (a second create answered %v); leases need conditional writes", s.cfg, err)
	}
	if _, err := s.PutIfMatch(ctx, key, []byte("3"), etag); err != nil {
		return fmt.Errorf("object store %s: If-Match with the current ETag: %w", s.cfg, err)
	}
	if _, err := s.PutIfMatch(ctx, key, []byte("4"), etag); !errors.Is(err, ErrPrecondition) {
		return fmt.Errorf("object store %s does not honour If-Match (a stale ETag answered %v); leases need conditional writes", s.cfg, err)
	}
	return nil
}

// wrap maps the SDK's errors to ours, keeping the original for %v.
func (s *Store) wrap(op, key string, err error) error {
	var nsk *types.NoSuchKey
	var nf *types.NotFound
	if errors.As(err, &nsk) || errors.As(err, &nf) {
		return fmt.Errorf("object store %s %s: %w", op, key, ErrNotFound)
	}
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		switch re.HTTPStatusCode() {
		case http.StatusNotFound:
			return fmt.Errorf("object store %s %s: %w", op, key, ErrNotFound)
		case http.StatusPreconditionFailed, http.StatusConflict:
			return fmt.Errorf("object store %s %s: %w", op, key, ErrPrecondition)
		}
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "PreconditionFailed", "ConditionalRequestConflict":
			return fmt.Errorf("object store %s %s: %w", op, key, ErrPrecondition)
		case "NoSuchKey", "NotFound":
			return fmt.Errorf("object store %s %s: %w", op, key, ErrNotFound)
		}
	}
	return fmt.Errorf("object store %s %s: %w", op, key, err)
}
