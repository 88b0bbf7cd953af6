package stream

import (
	"testing"
	"time"
)

// TestCompareIdentity: the record's creation time and first sequence
// decide, table by table.
func TestCompareIdentity(t *testing.T) {
	created := time.Date(2026, 12, 2, 1, 0, 0, 123456789, time.UTC)
	meta := map[string]string{
		MetaCreatedPrefix + "JW_REVIEWS":  created.Format(time.RFC3339Nano),
		MetaFirstSeqPrefix + "JW_REVIEWS": "1",
		MetaCreatedPrefix + "KV_jw_plans": created.Format(time.RFC3339Nano),
		MetaCreatedPrefix + "JW_ANSWERS":  "yesterday",
		MetaFirstSeqPrefix + "JW_EVENTS":  "5",
		MetaCreatedPrefix + "JW_EVENTS":   created.Format(time.RFC3339Nano),
	}
	for _, tt := range []struct {
		name string
		have StreamIdentity
		bad  bool
	}{
		{"same", StreamIdentity{"JW_REVIEWS", created, 1}, false},
		{"created again", StreamIdentity{"JW_REVIEWS", created.Add(time.Nanosecond), 1}, true},
		{"lost its first messages", StreamIdentity{"JW_REVIEWS", created, 2}, true},
		{"confirmed floor", StreamIdentity{"JW_EVENTS", created, 5}, false},
		{"below the confirmed floor is fine", StreamIdentity{"JW_EVENTS", created, 1}, false},
		{"bucket: first sequence not checked", StreamIdentity{"KV_jw_plans", created, 0}, false},
		{"never recorded", StreamIdentity{"JW_PLANS", created, 1}, true},
		{"unreadable record", StreamIdentity{"JW_ANSWERS", created, 1}, true},
	} {
		p, bad := compareIdentity(tt.have, meta)
		if bad != tt.bad {
			t.Errorf("%s: problem %v (%q), want %v", tt.name, bad, p.Reason, tt.bad)
		}
	}
}
