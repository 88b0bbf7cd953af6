package stream

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jingwei/jingwei/schema"
)

// TopologyConfig configures EnsureTopology. The zero value is usable.
type TopologyConfig struct {
	// Prefix is the first subject token and the name stem of every stream
	// and bucket: "jw" gives jw.events.<session>, stream JW_EVENTS, bucket
	// jw_leases. Defaults to "jw".
	Prefix string
	// Replicas is the replica count of every stream and bucket: 1 on a
	// single server, 3 in a cluster. Defaults to 1.
	Replicas int
	// LeaseTTL is how long a lease lives without renewal. Defaults to 10 s;
	// at least 1 s. It is one setting per deployment: it is stored with
	// the leases bucket when that is created (MetaLeaseTTL), and
	// EnsureTopology refuses another value (a *ConflictError naming
	// "lease_ttl"); OpenTopology takes it from the bucket.
	LeaseTTL time.Duration
	// Partitions is how many partitions the sessions are divided into
	// (see the package documentation): the request queue and the plan log
	// are partitioned by the server with a subject transform, and a tool
	// worker owns a partition, not a session. Every process of a
	// deployment must use the same number: EnsureTopology refuses streams
	// made with another one (a *ConflictError naming "partitions"), and
	// OpenTopology takes the number from the streams. Defaults to
	// DefaultPartitions; 1 to MaxPartitions.
	Partitions int
	// LeaseMarkerTTL is how long the server keeps the marker it writes when
	// a lease expires (the bucket's LimitMarkerTTL). Defaults to 1 minute;
	// at least 1 s.
	LeaseMarkerTTL time.Duration
	// Duplicates is the Nats-Msg-Id dedup window of the streams. Defaults
	// to 2 minutes.
	Duplicates time.Duration
	// RequestTimeout bounds one attempt of a request to the server inside
	// Append (a publish, a re-read of the tail); Append retries after it
	// with the same Msg-Id, so a request lost in a leader change or a
	// reconnect does not wait for the caller's whole deadline. Defaults to
	// 3 s.
	RequestTimeout time.Duration
	// Limits bounds a session history at append and at load. Zero fields
	// mean docs/protocol.md §14's limits (100,000 events, 16 MiB); set smaller ones in
	// tests only.
	Limits schema.Limits
	// Repair, with EnsureTopology, mends an existing stream that lacks a
	// protection jingwei needs (deny delete, deny purge, a dedup window at
	// least Duplicates, direct gets) by updating it in place; nothing stored
	// is changed. Defaults to false: such a stream is refused with a
	// *ConflictError that says how to repair it. Needs the admin role.
	Repair bool
	// Logger defaults to zerolog.Nop().
	Logger zerolog.Logger
}

// WithDefaults returns c with zero fields set to their defaults.
func (c TopologyConfig) WithDefaults() TopologyConfig {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 10 * time.Second
	}
	if c.LeaseMarkerTTL <= 0 {
		c.LeaseMarkerTTL = time.Minute
	}
	if c.Duplicates <= 0 {
		c.Duplicates = 2 * time.Minute
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 3 * time.Second
	}
	if c.Partitions <= 0 {
		c.Partitions = DefaultPartitions
	}
	c.Limits = c.Limits.WithDefaults()
	return c
}

func (c TopologyConfig) validate() error {
	if !schema.ValidSession(c.Prefix) {
		return fmt.Errorf("stream: TopologyConfig.Prefix %q: want [A-Za-z0-9_-]+", c.Prefix)
	}
	if c.Replicas > 5 {
		return fmt.Errorf("stream: TopologyConfig.Replicas %d: at most 5", c.Replicas)
	}
	if c.LeaseTTL < time.Second {
		return fmt.Errorf("stream: TopologyConfig.LeaseTTL %s: at least 1s", c.LeaseTTL)
	}
	if c.LeaseMarkerTTL < time.Second {
		return fmt.Errorf("stream: TopologyConfig.LeaseMarkerTTL %s: at least 1s", c.LeaseMarkerTTL)
	}
	if c.Partitions > MaxPartitions {
		return fmt.Errorf("stream: TopologyConfig.Partitions %d: at most %d", c.Partitions, MaxPartitions)
	}
	return nil
}

// DefaultPartitions is TopologyConfig.Partitions's default: enough for a
// fleet of a few dozen tool workers, few enough that one worker owning
// them all costs one lease renewal per partition and renew interval.
const DefaultPartitions = 32

// MetaLeaseTTL is the metadata key of the leases bucket's stream
// (KV_<prefix>_leases) that holds the deployment's lease TTL (a Go
// duration, "10s"), written when the bucket is created: EnsureTopology
// refuses a TopologyConfig.LeaseTTL that differs (a *ConflictError naming
// "lease_ttl" with both values), and OpenTopology takes the TTL from it.
// A bucket made by an older jingwei has none and is taken as it is.
const MetaLeaseTTL = "jingwei.lease_ttl"

// MaxPartitions is the most partitions a topology may have.
const MaxPartitions = 1024

// Topology is jingwei's streams and buckets on one server or cluster, as
// made sure of by EnsureTopology. Safe for concurrent use.
type Topology struct {
	// JS is the JetStream context everything goes through.
	JS jetstream.JetStream
	// Prefix is the subject prefix ("jw").
	Prefix string

	// Events holds the session logs (JW_EVENTS, jw.events.<session>).
	Events jetstream.Stream
	// Requests is the work queue of tool requests (JW_REQUESTS).
	Requests jetstream.Stream
	// Reviews keeps reviews as an audit trail (JW_REVIEWS).
	Reviews jetstream.Stream
	// PlanLog keeps issued retry plans (JW_PLANS, jw.plans.<session>).
	PlanLog jetstream.Stream
	// Assessments keeps classification results (JW_ASSESSMENTS).
	Assessments jetstream.Stream
	// Answers holds the answers to tool requests that could not become a
	// call (JW_ANSWERS, jw.answers.<session>): the refusal an agent finds
	// for its request id when no tool.call carries it.
	AnswerLog jetstream.Stream
	// Approvals keeps approval requests and the signed approvals and
	// denials (JW_APPROVALS, approvals.go).
	ApprovalLog jetstream.Stream

	// Leases is the jw_leases bucket: key <session> is the lease, key
	// epoch.<session> the session's epoch counter.
	LeaseBucket jetstream.KeyValue
	// Plans is the jw_plans bucket: plan state by plan id.
	PlanBucket jetstream.KeyValue
	// Budget is the jw_budget bucket: counters by <session>.<task>.
	Budget jetstream.KeyValue

	cfg   TopologyConfig
	log   zerolog.Logger
	plans *Plans
}

// The topology hands out one small handle per resource, the way
// jetstream hands out a Stream or a KeyValue: each holds nothing but the
// topology and costs nothing to get.

// Names returns the topology's stream, consumer and subject names.
func (t *Topology) Names() Names { return Names{t} }

// Logs returns the handle on the session logs (JW_EVENTS).
func (t *Topology) Logs() Logs { return Logs{t} }

// Reader returns the handle that reads any of the topology's streams
// from the stream leader or with direct gets.
func (t *Topology) Reader() Reader { return Reader{t} }

// Leases returns the handle on session and partition leases, worker
// registrations and takeovers (the jw_leases bucket).
func (t *Topology) Leases() Leases { return Leases{t} }

// Plans returns the plan store (the jw_plans bucket and JW_PLANS).
func (t *Topology) Plans() *Plans { return t.plans }

// Approvals returns the handle on approval requests (JW_APPROVALS).
func (t *Topology) Approvals() Approvals { return Approvals{t} }

// Answers returns the handle on answers to requests (JW_ANSWERS).
func (t *Topology) Answers() Answers { return Answers{t} }

// Config returns the configuration the topology was made with, defaults
// filled in.
func (t *Topology) Config() TopologyConfig { return t.cfg }

// Limits returns the history limits enforced at append and load.
func (t *Topology) Limits() schema.Limits { return t.cfg.Limits }

// StreamName returns the name of the stream of kind for a prefix ("jw",
// "EVENTS" → "JW_EVENTS").
func StreamName(prefix, kind string) string { return streamName(prefix, kind) }

func streamName(prefix, kind string) string {
	return strings.ToUpper(strings.ReplaceAll(prefix, "-", "_")) + "_" + kind
}

// Partition returns the partition of session among n partitions, exactly
// as nats-server's subject transform function partition(n,1) computes it
// on jw.requests.<session>: the 32-bit FNV-1a hash of the session id,
// modulo n. It is 0 when n is not positive.
func Partition(session string, n int) int {
	if n <= 0 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(session))
	return int(h.Sum32() % uint32(n))
}

// ReviewsSubject returns <prefix>.reviews.<session>, where reviews of the
// session are published, for a reviewer that has a connection and a prefix
// but no topology (DefaultPrefix when prefix is "").
func ReviewsSubject(prefix, session string) string {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return prefix + ".reviews." + session
}

// DefaultPrefix is the subject prefix of a topology whose config names
// none (TopologyConfig.Prefix, RoleConfig.Prefix).
const DefaultPrefix = "jw"

// APISubject returns <prefix>.api.<endpoint>, the request subject of a
// `jingwei` service endpoint, for clients that have a connection and a
// prefix but no topology (DefaultPrefix when prefix is "").
func APISubject(prefix, endpoint string) string {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return prefix + ".api." + endpoint
}

// Drop deletes every stream and bucket of the topology, best effort (the
// first error is returned, the rest still tried): for benchmarks and tests
// that reuse a server and want its store small. It needs admin
// permissions; nothing of jingwei's survives it.
func (t *Topology) Drop(ctx context.Context) error {
	var first error
	for _, sc := range t.cfg.streamSpecs() {
		if err := t.JS.DeleteStream(ctx, sc.Name); err != nil && first == nil {
			first = err
		}
	}
	for _, kc := range t.cfg.bucketSpecs() {
		if err := t.JS.DeleteKeyValue(ctx, kc.Bucket); err != nil && first == nil {
			first = err
		}
	}
	if err := t.JS.DeleteStream(ctx, IdentityStreamName(t.Prefix)); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) && first == nil {
		first = err
	}
	return first
}

// SessionOf returns the session token of a jingwei subject
// (jw.events.s-1 → s-1, and the stored subject of a partitioned stream
// jw.requests.7.s-1 → s-1), or "" if the subject has no session token.
// It allocates nothing (the recovery worker calls it for every event it
// classifies).
func SessionOf(subject string) string {
	switch strings.Count(subject, ".") {
	case 2:
		return subject[strings.LastIndexByte(subject, '.')+1:]
	case 3:
		_, rest, _ := strings.Cut(subject, ".")
		_, rest, _ = strings.Cut(rest, ".")
		if num, s, _ := strings.Cut(rest, "."); isDigits(num) {
			return s
		}
	}
	return ""
}

func isDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// streamSpecs is what jingwei needs of its streams; existing streams are
// compared against them (compareStream).
func (c TopologyConfig) streamSpecs() []jetstream.StreamConfig {
	p := c.Prefix
	mk := func(kind, subj, desc string, ret jetstream.RetentionPolicy) jetstream.StreamConfig {
		var tr *jetstream.SubjectTransformConfig
		if subj == "requests" || subj == "plans" {
			tr = partitionTransform(p+"."+subj, c.Partitions)
		}
		return jetstream.StreamConfig{
			SubjectTransform: tr,
			Name:             streamName(p, kind),
			Description:      desc,
			Subjects:         []string{p + "." + subj + ".*"},
			Retention:        ret,
			Storage:          jetstream.FileStorage,
			Replicas:         c.Replicas,
			Duplicates:       c.Duplicates,
			Discard:          jetstream.DiscardOld,
		}
	}
	// Every jingwei stream is an audit trail or a work queue whose messages
	// leave only by acknowledgement: none allows deleting or purging a
	// message (a removed last event would also reset a session log's
	// expected-sequence check). Direct gets let readers load histories
	// without a consumer.
	specs := []jetstream.StreamConfig{
		mk("EVENTS", "events", "jingwei session logs (never expire or purge)", jetstream.LimitsPolicy),
		mk("REQUESTS", "requests", "jingwei tool-call requests (work queue)", jetstream.WorkQueuePolicy),
		mk("REVIEWS", "reviews", "jingwei reviews (audit trail)", jetstream.LimitsPolicy),
		mk("PLANS", "plans", "jingwei issued retry plans", jetstream.LimitsPolicy),
		mk("ASSESSMENTS", "assessments", "jingwei call assessments", jetstream.LimitsPolicy),
		mk("ANSWERS", "answers", "jingwei answers to tool requests that could not become calls", jetstream.LimitsPolicy),
		c.approvalsSpec(),
	}
	for i := range specs {
		specs[i].DenyDelete, specs[i].DenyPurge, specs[i].AllowDirect = true, true, true
	}
	for i := range specs {
		if specs[i].Name != streamName(p, "REQUESTS") || c.Replicas > 1 {
			continue
		}
		// A request is a delivery vehicle, not a fact recovery decides
		// from: the tool.call that records it is. On one server its queue
		// writes (the store, and the removal on acknowledgement) are
		// flushed asynchronously, not fsynced one by one with sync
		// always: a server crash may lose a request not yet recorded,
		// whose agent then sees neither a call nor an answer and sends it
		// again under the same request id (docs/protocol.md §12).
		// nats-server allows the mode on one replica only.
		specs[i].PersistMode = jetstream.AsyncPersistMode
	}
	return specs
}

// partitionTransform is the subject transform that files <base>.<session>
// under <base>.<partition>.<session>.
func partitionTransform(base string, n int) *jetstream.SubjectTransformConfig {
	return &jetstream.SubjectTransformConfig{
		Source:      base + ".*",
		Destination: base + ".{{partition(" + strconv.Itoa(n) + ",1)}}.{{wildcard(1)}}",
	}
}

// partitionsOf returns the number of partitions a stream's subject
// transform files its subjects under, 0 when it has no partition
// transform.
func partitionsOf(sc jetstream.StreamConfig) int {
	if sc.SubjectTransform == nil {
		return 0
	}
	m := partitionRE.FindStringSubmatch(sc.SubjectTransform.Destination)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

var partitionRE = regexp.MustCompile(`\{\{\s*partition\(\s*(\d+)\s*,\s*1\s*\)\s*\}\}`)

func (c TopologyConfig) bucketSpecs() []jetstream.KeyValueConfig {
	return []jetstream.KeyValueConfig{
		{Bucket: c.Prefix + "_leases", Description: "jingwei session and partition leases, worker registry", History: 1, Storage: jetstream.FileStorage, Replicas: c.Replicas, LimitMarkerTTL: c.LeaseMarkerTTL,
			Metadata: map[string]string{MetaLeaseTTL: c.LeaseTTL.String()}},
		{Bucket: c.Prefix + "_plans", Description: "jingwei plan state", History: 1, Storage: jetstream.FileStorage, Replicas: c.Replicas},
		{Bucket: c.Prefix + "_budget", Description: "jingwei tool-call budgets", History: 1, Storage: jetstream.FileStorage, Replicas: c.Replicas},
	}
}

// EnsureTopology creates jingwei's streams and buckets where missing and
// checks existing ones. It is idempotent and safe to run from many processes
// at once. An existing stream or bucket whose subjects, retention, storage,
// replicas, age limit or per-subject limit conflict with jingwei's is
// reported as a *ConflictError (errors.Is ErrTopologyConflict) and left as
// it is: nothing is ever replaced or purged. It then records the identity
// of each protected stream not recorded yet (RecordIdentity; an entry
// already recorded is never changed: see ConfirmIdentity).
func EnsureTopology(ctx context.Context, js jetstream.JetStream, cfg TopologyConfig) (*Topology, error) {
	t, err := topology(ctx, js, cfg, true)
	if err != nil {
		return nil, err
	}
	if err := RecordIdentity(ctx, js, t.Prefix, t.cfg.Replicas); err != nil {
		return nil, err
	}
	return t, nil
}

// OpenTopology is EnsureTopology for read-only clients (export, inspect,
// status): it looks the streams and buckets up and creates nothing; a
// missing one is ErrNoTopology. It does not compare their settings with
// cfg (replicas, dedup window, protections): a reader works against any
// deployment, single node or cluster.
func OpenTopology(ctx context.Context, js jetstream.JetStream, cfg TopologyConfig) (*Topology, error) {
	return topology(ctx, js, cfg, false)
}

func topology(ctx context.Context, js jetstream.JetStream, cfg TopologyConfig, create bool) (*Topology, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	t := &Topology{JS: js, Prefix: cfg.Prefix, cfg: cfg, log: cfg.Logger}
	streams := make([]jetstream.Stream, 0, 6)
	for _, want := range cfg.streamSpecs() {
		s, err := ensureStream(ctx, js, want, create, create && cfg.Repair)
		if err != nil {
			return nil, err
		}
		streams = append(streams, s)
	}
	t.Events, t.Requests, t.Reviews, t.PlanLog, t.Assessments, t.AnswerLog = streams[0], streams[1], streams[2], streams[3], streams[4], streams[5]
	t.ApprovalLog = streams[6]
	if !create {
		// A reader takes the partitions from the streams (0: an older,
		// unpartitioned store).
		t.cfg.Partitions = partitionsOf(t.Requests.CachedInfo().Config)
	}
	kvs := make([]jetstream.KeyValue, 0, 3)
	for _, want := range cfg.bucketSpecs() {
		kv, err := ensureBucket(ctx, js, want, create, create && cfg.Repair)
		if err != nil {
			return nil, err
		}
		kvs = append(kvs, kv)
	}
	t.LeaseBucket, t.PlanBucket, t.Budget = kvs[0], kvs[1], kvs[2]
	t.plans = &Plans{kv: kvs[1], now: time.Now, t: t}
	if !create {
		// A reader takes the lease TTL from the bucket, where the
		// deployment stored it.
		if st, err := t.LeaseBucket.Status(ctx); err == nil {
			if si, ok := st.(*jetstream.KeyValueBucketStatus); ok {
				if d, err := time.ParseDuration(si.StreamInfo().Config.Metadata[MetaLeaseTTL]); err == nil && d > 0 {
					t.cfg.LeaseTTL = d
				}
			}
		}
	}
	return t, nil
}

func ensureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig, create, repair bool) (jetstream.Stream, error) {
	for attempt := 0; ; attempt++ {
		s, err := lookupRetrying(ctx, func(ctx context.Context) (jetstream.Stream, error) { return js.Stream(ctx, want.Name) })
		if err == nil && !create {
			return s, nil
		}
		if err == nil {
			have := s.CachedInfo().Config
			err := compareStream(have, want)
			var ce *ConflictError
			if errors.As(err, &ce) && ce.repairable() && repair {
				return repairStream(ctx, js, have, want)
			}
			if err != nil {
				return nil, err
			}
			return s, nil
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("stream: look up %s: %w", want.Name, err)
		}
		if !create {
			return nil, fmt.Errorf("%w: stream %s not found", ErrNoTopology, want.Name)
		}
		cctx, cancel := context.WithTimeout(ctx, createTimeout)
		s, err = js.CreateStream(cctx, want)
		cancel()
		if err == nil {
			return s, nil
		}
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return nil, noPermission("stream "+want.Name, err)
		}
		// Another process created it in between: check what it made.
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) && attempt < 3 {
			continue
		}
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeSubjectOverlap {
			return nil, &ConflictError{Stream: want.Name, Field: "subjects", Have: "overlapping another stream", Want: strings.Join(want.Subjects, ",")}
		}
		return nil, fmt.Errorf("stream: create %s: %w", want.Name, err)
	}
}

// repairStream adds to have the protections want asks for (deny delete,
// deny purge, a dedup window at least as long, direct gets) and updates the
// stream; everything else, and every stored message, stays as it is.
func repairStream(ctx context.Context, js jetstream.JetStream, have, want jetstream.StreamConfig) (jetstream.Stream, error) {
	cfg := have
	cfg.DenyDelete = have.DenyDelete || want.DenyDelete
	cfg.DenyPurge = have.DenyPurge || want.DenyPurge
	cfg.AllowDirect = have.AllowDirect || want.AllowDirect
	cfg.Duplicates = max(have.Duplicates, want.Duplicates)
	s, err := js.UpdateStream(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("stream: repair %s: %w", want.Name, err)
	}
	if err := compareSafety(want.Name, s.CachedInfo().Config, want); err != nil {
		return nil, err
	}
	return s, nil
}

// compareStream reports the first setting of have that conflicts with want.
func compareStream(have, want jetstream.StreamConfig) error {
	c := func(field, h, w string) error {
		return &ConflictError{Stream: want.Name, Field: field, Have: h, Want: w}
	}
	hs, ws := slices.Clone(have.Subjects), slices.Clone(want.Subjects)
	slices.Sort(hs)
	slices.Sort(ws)
	if !slices.Equal(hs, ws) {
		return c("subjects", strings.Join(hs, ","), strings.Join(ws, ","))
	}
	if have.Retention != want.Retention {
		return c("retention", have.Retention.String(), want.Retention.String())
	}
	if want.SubjectTransform != nil {
		hn, wn := partitionsOf(have), partitionsOf(want)
		switch {
		case hn == 0:
			return c("partitions", "none (no subject transform "+want.SubjectTransform.Destination+")", fmt.Sprintf("%d: an unpartitioned queue made by an older jingwei; drain it and recreate it", wn))
		case hn != wn || *have.SubjectTransform != *want.SubjectTransform:
			return c("partitions", fmt.Sprint(hn), fmt.Sprintf("%d (TopologyConfig.Partitions: every process of a deployment must use the same number)", wn))
		}
	}
	if have.Storage != want.Storage {
		return c("storage", have.Storage.String(), want.Storage.String())
	}
	if max(have.Replicas, 1) != want.Replicas {
		return c("replicas", fmt.Sprint(have.Replicas), fmt.Sprint(want.Replicas))
	}
	if have.MaxAge != want.MaxAge {
		return c("max_age", have.MaxAge.String(), want.MaxAge.String())
	}
	if have.MaxMsgsPerSubject > 0 && want.MaxMsgsPerSubject <= 0 {
		return c("max_msgs_per_subject", fmt.Sprint(have.MaxMsgsPerSubject), "unlimited")
	}
	if have.MaxMsgs > 0 && want.MaxMsgs <= 0 {
		return c("max_msgs", fmt.Sprint(have.MaxMsgs), "unlimited")
	}
	if have.MaxBytes > 0 && want.MaxBytes <= 0 {
		return c("max_bytes", fmt.Sprint(have.MaxBytes), "unlimited")
	}
	if have.Sealed {
		return c("sealed", "true", "false")
	}
	return compareSafety(want.Name, have, want)
}

// compareSafety reports the first setting that makes have weaker than want
// in a way a client could exploit or that loses protection: a stream that
// allows deleting or purging messages, a shorter Nats-Msg-Id dedup window,
// no direct gets. Each can be repaired in place (Repair), which is what the
// error says.
func compareSafety(name string, have, want jetstream.StreamConfig) error {
	c := func(field, h, w, fix string) error {
		return &ConflictError{Stream: name, Field: field, Have: h, Want: w, Repair: fix}
	}
	switch {
	case want.DenyDelete && !have.DenyDelete:
		return c("deny_delete", "false", "true", "nats stream edit "+name+" --deny-delete")
	case want.DenyPurge && !have.DenyPurge:
		return c("deny_purge", "false", "true", "nats stream edit "+name+" --deny-purge")
	case want.Duplicates > 0 && have.Duplicates < want.Duplicates:
		return c("duplicates", have.Duplicates.String(), "at least "+want.Duplicates.String(), "nats stream edit "+name+" --dupe-window "+want.Duplicates.String())
	case want.AllowDirect && !have.AllowDirect:
		return c("allow_direct", "false", "true", "nats stream edit "+name+" --allow-direct")
	}
	return nil
}

// repairable reports whether a conflict can be mended by updating the
// stream in place (adding a protection, widening the dedup window, allowing
// direct gets); nothing stored is touched.
func (e *ConflictError) repairable() bool { return e.Repair != "" }

func ensureBucket(ctx context.Context, js jetstream.JetStream, want jetstream.KeyValueConfig, create, repair bool) (jetstream.KeyValue, error) {
	name := "KV_" + want.Bucket
	for attempt := 0; ; attempt++ {
		kv, err := lookupRetrying(ctx, func(ctx context.Context) (jetstream.KeyValue, error) { return js.KeyValue(ctx, want.Bucket) })
		if err == nil && !create {
			return kv, nil
		}
		if err == nil {
			st, err := kv.Status(ctx)
			if err != nil {
				return nil, fmt.Errorf("stream: bucket %s status: %w", want.Bucket, err)
			}
			err = compareBucket(name, st, want)
			var ce *ConflictError
			if errors.As(err, &ce) && ce.repairable() && repair {
				if si, ok := st.(*jetstream.KeyValueBucketStatus); ok {
					if _, err := repairStream(ctx, js, si.StreamInfo().Config, jetstream.StreamConfig{Name: name, DenyDelete: true, AllowDirect: true}); err != nil {
						return nil, err
					}
					continue
				}
			}
			if err != nil {
				return nil, err
			}
			return kv, nil
		}
		if !errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, fmt.Errorf("stream: look up bucket %s: %w", want.Bucket, err)
		}
		if !create {
			return nil, fmt.Errorf("%w: bucket %s not found", ErrNoTopology, want.Bucket)
		}
		cctx, cancel := context.WithTimeout(ctx, createTimeout)
		kv, err = js.CreateKeyValue(cctx, want)
		cancel()
		if err == nil {
			return kv, nil
		}
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return nil, noPermission("bucket "+want.Bucket, err)
		}
		if (errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse)) && attempt < 3 {
			continue
		}
		return nil, fmt.Errorf("stream: create bucket %s: %w", want.Bucket, err)
	}
}

func compareBucket(name string, st jetstream.KeyValueStatus, want jetstream.KeyValueConfig) error {
	c := func(field, h, w string) error {
		return &ConflictError{Stream: name, Field: field, Have: h, Want: w}
	}
	if st.TTL() != 0 {
		return c("ttl", st.TTL().String(), "none")
	}
	if want.LimitMarkerTTL > 0 && st.LimitMarkerTTL() == 0 {
		return c("limit_marker_ttl", "none", want.LimitMarkerTTL.String())
	}
	if st.History() < int64(want.History) {
		return c("history", fmt.Sprint(st.History()), fmt.Sprint(want.History))
	}
	if si, ok := st.(*jetstream.KeyValueBucketStatus); ok {
		have := si.StreamInfo().Config
		if w, ok := want.Metadata[MetaLeaseTTL]; ok {
			if h, ok := have.Metadata[MetaLeaseTTL]; ok && h != w {
				return c("lease_ttl", h, w+" (TopologyConfig.LeaseTTL, --lease-ttl: every process of a deployment must use the deployment's lease TTL)")
			}
		}
		if r := max(have.Replicas, 1); r != want.Replicas {
			return c("replicas", fmt.Sprint(r), fmt.Sprint(want.Replicas))
		}
		// A bucket cannot deny purges (its rollups need them); the roles
		// keep everyone but admin from the purge API.
		return compareSafety(name, have, jetstream.StreamConfig{DenyDelete: true, AllowDirect: true})
	}
	return nil
}

// ValidateSession returns ErrInvalidSession (wrapped, naming the id) unless
// s is 1–128 bytes of [A-Za-z0-9_-].
func ValidateSession(s string) error {
	if !schema.ValidSession(s) {
		return fmt.Errorf("%w: %q (want 1-128 bytes of [A-Za-z0-9_-])", ErrInvalidSession, s)
	}
	return nil
}

// createTimeout bounds the creation of one stream or bucket. A client
// without the admin role is not allowed to create anything: the server
// drops its request, and it would otherwise wait for its whole context.
const createTimeout = 5 * time.Second

// lookupRetry is how a lookup of a stream or bucket when a topology is
// opened (and each get of ListPlans) is tried: attempts of at most a
// second, again every 100 ms while one times out or fails transiently, for
// 10 s. A stream whose leader is being elected (nats-server's raft: 4–9 s
// after the node that led it died) answers nothing, so a lookup sent then
// waited for jetstream's whole default timeout (5 s) even when the new
// leader came a moment later — a recovery worker restarted during a node
// loss started 5 s late (the cluster chaos runs' slowest crash →
// assessment samples). Past the 10 s the error is returned, as before.
var lookupRetry = RetryPolicy{Attempt: time.Second, First: 100 * time.Millisecond, Max: 100 * time.Millisecond, For: 10 * time.Second}

// lookupRetrying is Retrying with lookupRetry.
func lookupRetrying[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	return Retrying(ctx, lookupRetry, f)
}

// RetryPolicy says how Retrying tries a request again.
type RetryPolicy struct {
	// Attempt bounds each attempt (its context's timeout). Required.
	Attempt time.Duration
	// First is the wait after the first failed attempt; each further
	// wait doubles, up to Max (Max below First means First).
	First, Max time.Duration
	// For, when positive, gives up once the next wait would end more
	// than For after the first attempt began; zero means until ctx ends.
	For time.Duration
}

// Retrying runs f with attempts of at most p.Attempt, again after a
// transient failure (Transient: a timed-out or unanswered request, a 503
// while a leader is elected, no responders), waiting as p says between
// attempts, until f succeeds, fails otherwise, ctx ends or p.For has
// passed; it returns f's last result. A request to a stream whose leader
// is being elected is dropped without an answer, so a bounded attempt sent
// again reaches the new leader as soon as it is there, where one unbounded
// request would wait its whole deadline. f must be safe to send again (a
// read, a create, a compare-and-set at a revision, a publish with its
// Msg-Id and expected sequence).
func Retrying[T any](ctx context.Context, p RetryPolicy, f func(context.Context) (T, error)) (T, error) {
	start, wait := time.Now(), p.First
	for {
		actx, cancel := context.WithTimeout(ctx, p.Attempt)
		v, err := f(actx)
		cancel()
		if err == nil || ctx.Err() != nil || !Transient(err) || p.For > 0 && !time.Now().Add(wait).Before(start.Add(p.For)) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(wait):
		}
		wait = min(2*wait, max(p.Max, p.First))
	}
}

// noPermission is the error of a create that got no answer: most likely
// the connection lacks the admin role.
func noPermission(what string, err error) error {
	return fmt.Errorf("%w: %s does not exist and creating it got no answer (%v): the topology is created by a connection with the admin role (jingwei serve does it; on an external server run jingwei setup with the admin credentials)", ErrNoTopology, what, err)
}

// errCodeSubjectOverlap is nats-server's JSStreamSubjectOverlapErr.
const errCodeSubjectOverlap jetstream.ErrorCode = 10065
