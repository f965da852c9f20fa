package objstore

import (
	"context"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Dirs lists the names one level below dir (relative to the store's
// prefix, without a trailing slash): the distinct next segments of the
// keys under dir/, as S3 lists common prefixes with the delimiter "/".
// It reads a page per 1,000 names however many objects lie below them
// (package replica finds a workspace's generations with it).
func (s *Store) Dirs(ctx context.Context, dir string) ([]string, error) {
	if err := checkKey(dir); err != nil {
		return nil, err
	}
	full := s.Key(dir) + "/"
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: &s.cfg.Bucket, Prefix: aws.String(full), Delimiter: aws.String("/")})
	var out []string
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, s.wrap("list", dir, err)
		}
		for _, cp := range page.CommonPrefixes {
			name := strings.TrimSuffix(strings.TrimPrefix(aws.ToString(cp.Prefix), full), "/")
			if name != "" {
				out = append(out, name)
			}
		}
	}
	return out, nil
}
