// The franz-go side of the conformance suite (issue 40): each subcommand runs one scenario with
// franz-go (github.com/twmb/franz-go, pkg/kgo and pkg/kadm) against the bootstrap it is given and
// prints what a user sees as one JSON object on stdout. Built by tests/reference/franz.py into a
// cache outside the repo; never used by the product.
//
//	franzclient produce <bootstrap> <topic-prefix> <records>
//	franzclient group   <bootstrap> <topic> <group> <records>
//	franzclient admin   <bootstrap> <topic-prefix>
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Every wait of a scenario is bounded by this; a scenario that does not finish in it fails.
const scenarioTimeout = 120 * time.Second

func main() {
	if len(os.Args) < 3 {
		fail(fmt.Errorf("usage: franzclient produce|group|admin <bootstrap> ..."))
	}
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	defer cancel()
	cmd, seeds := os.Args[1], strings.Split(os.Args[2], ",")
	var out any
	var err error
	switch cmd {
	case "produce":
		out, err = produce(ctx, seeds, os.Args[3], atoi(os.Args[4]))
	case "group":
		out, err = group(ctx, seeds, os.Args[3], os.Args[4], atoi(os.Args[5]))
	case "admin":
		out, err = admin(ctx, seeds, os.Args[3])
	default:
		err = fmt.Errorf("unknown subcommand %q", cmd)
	}
	if err != nil {
		fail(err)
	}
	text, err := json.Marshal(out)
	if err != nil {
		fail(err)
	}
	fmt.Println(string(text))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "franzclient:", err)
	os.Exit(1)
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		fail(err)
	}
	return n
}

// errName is the Kafka error name a user of franz-go sees ("" for none).
func errName(err error) string {
	if err == nil {
		return ""
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Message
	}
	return "client: " + err.Error()
}

func client(seeds []string, opts ...kgo.Opt) (*kgo.Client, error) {
	base := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.RequestTimeoutOverhead(15 * time.Second),
		kgo.RetryTimeout(30 * time.Second)}
	return kgo.NewClient(append(base, opts...)...)
}

func createTopic(ctx context.Context, adm *kadm.Client, topic string, partitions int32) error {
	resp, err := adm.CreateTopic(ctx, partitions, 3, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("create %s: %w", topic, err)
	}
	return waitLeaders(ctx, adm, topic, int(partitions))
}

// waitLeaders polls the metadata until every partition of topic has a leader.
func waitLeaders(ctx context.Context, adm *kadm.Client, topic string, partitions int) error {
	for {
		details, err := adm.ListTopics(ctx, topic)
		if err == nil {
			d := details[topic]
			ready := d.Err == nil && len(d.Partitions) == partitions
			for _, p := range d.Partitions {
				ready = ready && p.Leader >= 0 && p.Err == nil
			}
			if ready {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: no leader for every partition: %w", topic, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

type row struct {
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Key       string `json:"key"`
	Value     string `json:"value"`
}

func sortRows(rows []row) {
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Partition != rows[j].Partition {
			return rows[i].Partition < rows[j].Partition
		}
		return rows[i].Offset < rows[j].Offset
	})
}

var codecs = map[string]kgo.CompressionCodec{
	"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
	"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
}

// produce: for each compression, an idempotent acks=all producer writes `records` keyed records
// (synchronously, one at a time, so the offsets are the same on any broker) to a topic of 3
// partitions; a direct consumer reads them back from the start.
func produce(ctx context.Context, seeds []string, prefix string, records int) (any, error) {
	admCl, err := client(seeds)
	if err != nil {
		return nil, err
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	out := map[string]any{}
	for _, name := range []string{"none", "gzip", "snappy", "lz4", "zstd"} {
		topic := prefix + "-" + name
		if err := createTopic(ctx, adm, topic, 3); err != nil {
			return nil, err
		}
		p, err := client(seeds, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchCompression(codecs[name]),
			kgo.DefaultProduceTopic(topic))
		if err != nil {
			return nil, err
		}
		var acked []row
		for i := 0; i < records; i++ {
			rec := &kgo.Record{Key: []byte(fmt.Sprintf("k%d", i%7)), Value: []byte(fmt.Sprintf("v%d", i)),
				Headers: []kgo.RecordHeader{{Key: "n", Value: []byte(strconv.Itoa(i))}}}
			r, err := p.ProduceSync(ctx, rec).First()
			if err != nil {
				p.Close()
				return nil, fmt.Errorf("%s: produce %d: %w", topic, i, err)
			}
			acked = append(acked, row{r.Partition, r.Offset, string(r.Key), string(r.Value)})
		}
		p.Close()
		c, err := client(seeds, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			return nil, err
		}
		var read []row
		headersOK := true
		for len(read) < records {
			fs := c.PollFetches(ctx)
			if ctx.Err() != nil {
				c.Close()
				return nil, fmt.Errorf("%s: read %d of %d records: %w", topic, len(read), records, ctx.Err())
			}
			fs.EachError(func(t string, p int32, err error) { fmt.Fprintln(os.Stderr, "fetch", t, p, err) })
			fs.EachRecord(func(r *kgo.Record) {
				headersOK = headersOK && len(r.Headers) == 1 && r.Headers[0].Key == "n"
				read = append(read, row{r.Partition, r.Offset, string(r.Key), string(r.Value)})
			})
		}
		c.Close()
		sortRows(acked)
		sortRows(read)
		out[name] = map[string]any{"acked": acked, "read": read, "headers": headersOK}
	}
	return out, nil
}

// member is one consumer-group member polling in its own goroutine.
type member struct {
	cl       *kgo.Client
	mu       sync.Mutex
	assigned map[int32]bool
	records  map[string]int // value -> times seen
	done     chan struct{}
}

func newMember(seeds []string, topic, group string) (*member, error) {
	m := &member{assigned: map[int32]bool{}, records: map[string]int{}, done: make(chan struct{})}
	cl, err := client(seeds, kgo.ConsumeTopics(topic), kgo.ConsumerGroup(group), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.SessionTimeout(10*time.Second),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) {
			m.mu.Lock()
			defer m.mu.Unlock()
			for _, p := range a[topic] {
				m.assigned[p] = true
			}
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, r map[string][]int32) {
			// Commit what was read before giving partitions away, as a franz-go user does.
			_ = cl.CommitUncommittedOffsets(ctx)
			m.mu.Lock()
			defer m.mu.Unlock()
			for _, p := range r[topic] {
				delete(m.assigned, p)
			}
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, l map[string][]int32) {
			m.mu.Lock()
			defer m.mu.Unlock()
			for _, p := range l[topic] {
				delete(m.assigned, p)
			}
		}))
	if err != nil {
		return nil, err
	}
	m.cl = cl
	go func() {
		defer close(m.done)
		for {
			fs := cl.PollFetches(context.Background())
			if fs.IsClientClosed() {
				return
			}
			fs.EachRecord(func(r *kgo.Record) {
				m.mu.Lock()
				m.records[string(r.Value)]++
				m.mu.Unlock()
			})
		}
	}()
	return m, nil
}

func (m *member) partitions() []int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []int32{}
	for p := range m.assigned {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func (m *member) seen() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int{}
	for k, v := range m.records {
		out[k] = v
	}
	return out
}

// close commits what this member read, leaves the group and stops its poller.
func (m *member) close(ctx context.Context) error {
	err := m.cl.CommitUncommittedOffsets(ctx)
	m.cl.Close()
	<-m.done
	return err
}

func waitFor(ctx context.Context, what string, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

func produceValues(ctx context.Context, seeds []string, topic string, from, count int) error {
	p, err := client(seeds, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic(topic))
	if err != nil {
		return err
	}
	defer p.Close()
	rs := make([]*kgo.Record, 0, count)
	for i := from; i < from+count; i++ {
		rs = append(rs, &kgo.Record{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("v%d", i))})
	}
	return p.ProduceSync(ctx, rs...).FirstErr()
}

func union(ms ...*member) map[string]int {
	out := map[string]int{}
	for _, m := range ms {
		for k, v := range m.seen() {
			out[k] += v
		}
	}
	return out
}

// group: member a reads the first records alone; b joins (a rebalance splits the 4 partitions);
// both read the next records; a leaves and b takes every partition; after b leaves, a new member
// c resumes from the committed offsets and reads only what was produced after.
func group(ctx context.Context, seeds []string, topic, groupID string, records int) (any, error) {
	admCl, err := client(seeds)
	if err != nil {
		return nil, err
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	if err := createTopic(ctx, adm, topic, 4); err != nil {
		return nil, err
	}
	out := map[string]any{}
	if err := produceValues(ctx, seeds, topic, 0, records); err != nil {
		return nil, err
	}
	a, err := newMember(seeds, topic, groupID)
	if err != nil {
		return nil, err
	}
	if err := waitFor(ctx, "a reads the first records", func() bool { return len(a.seen()) == records }); err != nil {
		return nil, err
	}
	out["a_alone"] = a.partitions()
	if err := a.cl.CommitUncommittedOffsets(ctx); err != nil {
		return nil, fmt.Errorf("commit a: %w", err)
	}
	b, err := newMember(seeds, topic, groupID)
	if err != nil {
		return nil, err
	}
	if err := waitFor(ctx, "a and b split the partitions", func() bool {
		pa, pb := a.partitions(), b.partitions()
		return len(pa) == 2 && len(pb) == 2
	}); err != nil {
		return nil, fmt.Errorf("%w (a %v, b %v)", err, a.partitions(), b.partitions())
	}
	out["split"] = []int{len(a.partitions()), len(b.partitions())}
	if err := produceValues(ctx, seeds, topic, records, records); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, "a and b read the second records", func() bool { return len(union(a, b)) == 2*records }); err != nil {
		return nil, err
	}
	if err := a.close(ctx); err != nil {
		return nil, fmt.Errorf("close a: %w", err)
	}
	if err := waitFor(ctx, "b takes every partition", func() bool { return len(b.partitions()) == 4 }); err != nil {
		return nil, err
	}
	out["after_leave"] = b.partitions()
	if err := b.close(ctx); err != nil {
		return nil, fmt.Errorf("close b: %w", err)
	}
	dupes := 0
	for _, n := range union(a, b) {
		dupes += n - 1
	}
	out["read_ab"] = len(union(a, b))
	out["duplicates_ab"] = dupes
	committed, err := adm.FetchOffsets(ctx, groupID)
	if err != nil {
		return nil, err
	}
	total := int64(0)
	committed.Each(func(o kadm.OffsetResponse) { total += o.At })
	out["committed_total"] = total
	described, err := adm.DescribeGroups(ctx, groupID)
	if err != nil {
		return nil, err
	}
	dg := described[groupID]
	out["described"] = map[string]any{"state": dg.State, "protocol_type": dg.ProtocolType,
		"members": len(dg.Members), "err": errName(dg.Err)}
	if err := produceValues(ctx, seeds, topic, 2*records, records); err != nil {
		return nil, err
	}
	c, err := newMember(seeds, topic, groupID)
	if err != nil {
		return nil, err
	}
	err = waitFor(ctx, "c resumes", func() bool { return len(c.seen()) >= records })
	if cerr := c.close(ctx); err == nil && cerr != nil {
		err = fmt.Errorf("close c: %w", cerr)
	}
	if err != nil {
		return nil, err
	}
	resumed := c.seen()
	first := 1 << 30
	for v := range resumed {
		if n, _ := strconv.Atoi(strings.TrimPrefix(v, "v")); n < first {
			first = n
		}
	}
	out["resumed_read"] = len(resumed)
	out["resumed_first"] = first
	return out, nil
}

// admin: the kadm calls an operator's tool makes, with their errors.
func admin(ctx context.Context, seeds []string, prefix string) (any, error) {
	cl, err := client(seeds)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	out := map[string]any{}
	topic := prefix + "-a"
	retention := "3600000"
	created, err := adm.CreateTopic(ctx, 3, 3, map[string]*string{"retention.ms": &retention}, topic)
	out["create"] = map[string]any{"err": errName(firstErr(err, created.Err)), "partitions": created.NumPartitions,
		"rf": created.ReplicationFactor}
	if err := waitLeaders(ctx, adm, topic, 3); err != nil {
		return nil, err
	}
	dup, err := adm.CreateTopic(ctx, 3, 3, nil, topic)
	out["create_duplicate"] = errName(firstErr(err, dup.Err))
	badRF, err := adm.CreateTopic(ctx, 1, 7, nil, prefix+"-badrf")
	out["create_bad_rf"] = errName(firstErr(err, badRF.Err))
	details, err := adm.ListTopics(ctx, topic, prefix+"-missing")
	if err != nil {
		return nil, err
	}
	d := details[topic]
	out["describe"] = map[string]any{"partitions": len(d.Partitions), "rf": d.Partitions.NumReplicas(),
		"internal": d.IsInternal, "err": errName(d.Err)}
	out["describe_missing"] = errName(details[prefix+"-missing"].Err)
	if err := produceValues(ctx, seeds, topic, 0, 30); err != nil {
		return nil, err
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	var startSum, endSum int64
	starts.Each(func(o kadm.ListedOffset) { startSum += o.Offset })
	ends.Each(func(o kadm.ListedOffset) { endSum += o.Offset })
	out["offsets"] = map[string]int64{"start": startSum, "end": endSum}
	configs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return nil, err
	}
	rc, err := configs.On(topic, nil)
	out["config_retention"] = configValue(rc, "retention.ms")
	out["config_retention_err"] = errName(firstErr(err, rc.Err))
	alter := []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("7200000")},
		{Op: kadm.SetConfig, Name: "cleanup.policy", Value: kadm.StringPtr("compact")}}
	altered, err := adm.AlterTopicConfigs(ctx, alter, topic)
	if err == nil {
		ar, onErr := altered.On(topic, nil)
		err = firstErr(onErr, ar.Err)
	}
	out["alter_configs"] = errName(err)
	bad := []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "no.such.config", Value: kadm.StringPtr("1")}}
	badAltered, err := adm.AlterTopicConfigs(ctx, bad, topic)
	if err == nil {
		ar, onErr := badAltered.On(topic, nil)
		err = firstErr(onErr, ar.Err)
	}
	out["alter_unknown_config"] = errName(err)
	configs, err = adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return nil, err
	}
	rc, _ = configs.On(topic, nil)
	out["config_after_alter"] = map[string]string{"retention.ms": configValue(rc, "retention.ms"),
		"cleanup.policy": configValue(rc, "cleanup.policy")}
	more, err := adm.CreatePartitions(ctx, 2, topic)
	if err == nil {
		mr, onErr := more.On(topic, nil)
		err = firstErr(onErr, mr.Err)
	}
	out["create_partitions"] = errName(err)
	if err := waitLeaders(ctx, adm, topic, 5); err != nil {
		return nil, err
	}
	groupID := prefix + "-g"
	offsets := kadm.Offsets{}
	offsets.AddOffset(topic, 0, 4, -1)
	committed, err := adm.CommitOffsets(ctx, groupID, offsets)
	if err == nil {
		err = committed.Error()
	}
	out["commit_offsets"] = errName(err)
	fetched, err := adm.FetchOffsets(ctx, groupID)
	if err != nil {
		return nil, err
	}
	o, _ := fetched.Lookup(topic, 0)
	out["fetch_offsets"] = o.At
	described, err := adm.DescribeGroups(ctx, groupID)
	if err != nil {
		return nil, err
	}
	out["describe_group"] = map[string]any{"state": described[groupID].State, "err": errName(described[groupID].Err)}
	listed, err := adm.ListGroups(ctx)
	if err != nil {
		return nil, err
	}
	_, found := listed[groupID]
	out["list_groups_has_group"] = found
	deletedGroups, err := adm.DeleteGroups(ctx, groupID)
	if err == nil {
		err = deletedGroups.Error()
	}
	out["delete_group"] = errName(err)
	deleted, err := adm.DeleteTopics(ctx, topic, prefix+"-missing")
	if err != nil {
		return nil, err
	}
	out["delete"] = errName(deleted[topic].Err)
	out["delete_missing"] = errName(deleted[prefix+"-missing"].Err)
	return out, nil
}

func configValue(rc kadm.ResourceConfig, name string) string {
	for _, c := range rc.Configs {
		if c.Key == name {
			return c.MaybeValue()
		}
	}
	return "<absent>"
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
