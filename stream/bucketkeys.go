package stream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// BucketKeys lists the keys of a KV bucket from the subjects of its stream
// (a stream info request with a subject filter, paged), sorted. Unlike
// kv.Keys it needs no consumer, so a role that may only read a bucket (the
// host on jw_plans) can list it. Keys whose latest entry is a delete or
// purge marker are listed too: kv.Get returns ErrKeyDeleted for them. A
// missing bucket is jetstream.ErrBucketNotFound.
func BucketKeys(ctx context.Context, js jetstream.JetStream, bucket string) ([]string, error) {
	s, err := js.Stream(ctx, "KV_"+bucket)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("stream: bucket %s: %w", bucket, jetstream.ErrBucketNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("stream: bucket %s: %w", bucket, err)
	}
	pre := "$KV." + bucket + "."
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(pre+">"))
	if err != nil {
		return nil, fmt.Errorf("stream: list keys of %s: %w", bucket, err)
	}
	keys := make([]string, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		keys = append(keys, strings.TrimPrefix(subj, pre))
	}
	slices.Sort(keys)
	return keys, nil
}
