// This file is not part of corenode's module: scripts/etcd-robustness adds it
// to etcd's robustness package beside corenode_test.go (see there).
//
// The lease-expiry workload. etcd's model leaves expiry out (its traffic's
// leases have 2-hour TTLs), so beside etcd's traffic, under the same
// failpoint and against the same cluster, every run also grants short-TTL
// leases (leaseMinTTL to leaseMaxTTL seconds), attaches one key to each,
// never keeps them alive, and watches the keys disappear: a linearizable read of
// the keys' prefix through every member every pollEvery (and TimeToLive of
// a lease whose put failed), a watch of the prefix on every member, each
// member's leader and term, and canary
// commits (grants of leases without keys, which make no revision) that
// show when the cluster could commit. What it saw is written as a history
// in jepsen-lite's format and checked by jepsen-lite's lease checker
// (test/jepsen-lite/leasecheck, $CORENODE_ROBUSTNESS_LEASECHECK): a key
// never disappears before TTL has passed since its grant was sent, nor
// outlives TTL + --lease-checkpoint-after + --lease-tick + 250 ms + the
// time without a leader (docs/leases.md), nor comes back.
//
// The keys share etcd's keyspace and revisions with the traffic, and etcd's
// watchers watch every key, so etcd's checks must explain them: the grants
// and puts go through etcd's RecordingClient (they join the clients'
// reports), and each expiry joins them as a revoke of its lease answered at
// the revision of the key's delete event, called when the lease was granted
// and returned when the first watcher saw the event (expiryReports). What
// happened after the last revision etcd's watchers saw is left out of
// etcd's check, as they saw none of it.

package robustness

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	clientv3 "go.etcd.io/etcd/client/v3"

	"go.etcd.io/etcd/tests/v3/framework/e2e"
	"go.etcd.io/etcd/tests/v3/robustness/client"
	"go.etcd.io/etcd/tests/v3/robustness/failpoint"
	"go.etcd.io/etcd/tests/v3/robustness/identity"
	"go.etcd.io/etcd/tests/v3/robustness/model"
	"go.etcd.io/etcd/tests/v3/robustness/report"
	"go.etcd.io/etcd/tests/v3/robustness/scenarios"
	"go.etcd.io/etcd/tests/v3/robustness/traffic"
)

const (
	leasePrefix   = "lease-expiry/" // outside the traffic's "key" and "/registry/"
	leaseMinTTL   = 2               // seconds; the server may raise it (its minimum TTL)
	leaseMaxTTL   = 5
	grantEvery    = 150 * time.Millisecond
	pollEvery     = 100 * time.Millisecond
	canaryEvery   = 100 * time.Millisecond
	statusEvery   = 200 * time.Millisecond
	leaseOpLimit  = 2 * time.Second
	afterGoneFor  = time.Second      // a key seen gone is read a second more (it must not come back)
	observeAtMost = 12 * time.Second // past TTL, how long a key is watched at most
)

// leaseRecord is one line of the history, in jepsen-lite's format
// (test/jepsen-lite/internal/history.Op): times are nanoseconds since the
// run's baseTime, as etcd's reports have them.
type leaseRecord struct {
	ID      int64  `json:"id"`
	Process int    `json:"process"`
	Kind    string `json:"kind"`
	Member  int    `json:"member"`
	Key     string `json:"key,omitempty"`
	Value   string `json:"value,omitempty"`
	Start   int64  `json:"start"`
	End     int64  `json:"end"`
	Result  string `json:"result"`
	Rev     int64  `json:"rev,omitempty"`
	Expect  string `json:"expect,omitempty"`
	Found   bool   `json:"found,omitempty"`
	Event   string `json:"event,omitempty"`
	Lease   int64  `json:"lease,omitempty"`
	TTL     int64  `json:"ttl,omitempty"`
	Leader  uint64 `json:"leader,omitempty"`
	Term    uint64 `json:"term,omitempty"`
	Error   string `json:"error,omitempty"`
}

// jepsen-lite's kinds and results.
const (
	kindGrant    = "grant"
	kindLeasePut = "lease-put"
	kindLeaseGet = "lease-get"
	kindTTL      = "timetolive"
	kindWatch    = "watch"
	kindCanary   = "canary"
	kindStatus   = "status"
	resultOK     = "ok"
	resultFail   = "fail"
	resultUnsure = "indeterminate"
)

type expiryLease struct {
	id       int64
	key      string
	ttl      int64
	grantAt  time.Duration // the grant's call
	putAcked time.Duration // when its put was acknowledged (0: not)
	putLost  bool          // its put failed: TimeToLive tells when it is gone
	// The start of the last read that found its key, and the end of the
	// first that did not after its put was acknowledged: its expiry came
	// between the two (expiryReports).
	lastFound, firstAbsent time.Duration
	goneAt                 time.Time // when first seen gone (zero: not yet)
	deadline               time.Time // observed no later than this
}

type deleteSeen struct {
	rev int64
	at  time.Duration
}

// leaseExpiry is one run's workload.
type leaseExpiry struct {
	lg       *zap.Logger
	baseTime time.Time
	ids      identity.Provider
	rec      *client.RecordingClient
	members  []*clientv3.Client
	all      *clientv3.Client

	mu       sync.Mutex
	records  []leaseRecord
	leases   []*expiryLease
	byKey    map[string]*expiryLease
	deletes  map[string]deleteSeen // the first delete event of each key our watchers saw
	granting bool

	stopGrant chan struct{}
	stop      context.CancelFunc
	g         errgroup.Group
	observers sync.WaitGroup
}

func startLeaseExpiry(ctx context.Context, lg *zap.Logger, clus *e2e.EtcdProcessCluster, baseTime time.Time, ids identity.Provider) (*leaseExpiry, error) {
	var endpoints []string
	w := &leaseExpiry{lg: lg, baseTime: baseTime, ids: ids, byKey: map[string]*expiryLease{}, deletes: map[string]deleteSeen{},
		granting: true, stopGrant: make(chan struct{})}
	for _, p := range clus.Procs {
		endpoints = append(endpoints, p.EndpointsGRPC()...)
		c, err := clientv3.New(clientv3.Config{Endpoints: p.EndpointsGRPC(), Logger: zap.NewNop(), DialTimeout: time.Second,
			DialKeepAliveTime: 10 * time.Second, DialKeepAliveTimeout: 100 * time.Millisecond})
		if err != nil {
			w.close()
			return nil, err
		}
		w.members = append(w.members, c)
	}
	var err error
	if w.all, err = clientv3.New(clientv3.Config{Endpoints: endpoints, Logger: zap.NewNop(), DialTimeout: time.Second}); err != nil {
		w.close()
		return nil, err
	}
	if w.rec, err = client.NewRecordingClient(endpoints, ids, baseTime); err != nil {
		w.close()
		return nil, err
	}
	ctx, w.stop = context.WithCancel(ctx)
	w.g.Go(func() error { w.grant(ctx); return nil })
	w.g.Go(func() error { w.canary(ctx); return nil })
	for i, c := range w.members {
		w.observers.Add(1)
		go func() { defer w.observers.Done(); w.poll(ctx, i, c) }()
		w.g.Go(func() error { w.watch(ctx, i, c); return nil })
		w.g.Go(func() error { w.status(ctx, i, c); return nil })
	}
	return w, nil
}

func (w *leaseExpiry) now() time.Duration { return time.Since(w.baseTime) }

func (w *leaseExpiry) add(r leaseRecord) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r.ID = int64(len(w.records) + 1)
	w.records = append(w.records, r)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// grant grants a lease with a key every grantEvery until stopGranting,
// through etcd's recording client: its revisions are etcd's model's too.
func (w *leaseExpiry) grant(ctx context.Context) {
	defer func() {
		w.mu.Lock()
		w.granting = false
		w.mu.Unlock()
	}()
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-w.stopGrant:
			return
		case <-time.After(grantEvery):
		}
		ttl := leaseMinTTL + rng.Int63n(leaseMaxTTL-leaseMinTTL+1)
		key := fmt.Sprintf("%s%05d", leasePrefix, n)
		octx, cancel := context.WithTimeout(ctx, leaseOpLimit)
		start := w.now()
		resp, err := w.rec.LeaseGrant(octx, ttl)
		end := w.now()
		cancel()
		r := leaseRecord{Process: 1, Kind: kindGrant, Member: -1, Key: key, Start: int64(start), End: int64(end),
			Expect: fmt.Sprint(ttl), Error: errText(err), Result: resultOK}
		if err != nil {
			r.Result = resultUnsure
			w.add(r)
			continue
		}
		r.Lease, r.TTL = int64(resp.ID), resp.TTL
		w.add(r)
		l := &expiryLease{id: int64(resp.ID), key: key, ttl: resp.TTL, grantAt: start,
			deadline: time.Now().Add(time.Duration(resp.TTL)*time.Second + observeAtMost)}
		w.mu.Lock()
		w.leases = append(w.leases, l)
		w.byKey[key] = l
		w.mu.Unlock()

		value := fmt.Sprintf("lease-expiry-%d", n)
		octx, cancel = context.WithTimeout(ctx, leaseOpLimit)
		start = w.now()
		presp, err := w.rec.PutWithLease(octx, key, value, int64(resp.ID))
		end = w.now()
		cancel()
		r = leaseRecord{Process: 1, Kind: kindLeasePut, Member: -1, Key: key, Value: value, Lease: int64(resp.ID),
			Start: int64(start), End: int64(end), Error: errText(err), Result: resultOK}
		if err != nil {
			r.Result = resultUnsure
		} else {
			r.Rev = presp.Header.Revision
		}
		w.add(r)
		w.mu.Lock()
		if err == nil {
			l.putAcked = end
		} else {
			// Its key may never have been written: TimeToLive says when
			// the lease is gone.
			l.putLost = true
		}
		w.mu.Unlock()
	}
}

// canary grants a lease without keys every canaryEvery: a commit that
// makes no revision, so it is invisible to etcd's model, and its answers
// show when the cluster could commit (the checker counts gaps between
// commits as time without a leader).
func (w *leaseExpiry) canary(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(canaryEvery):
		}
		octx, cancel := context.WithTimeout(ctx, time.Second)
		start := w.now()
		_, err := w.all.Grant(octx, leaseMinTTL)
		end := w.now()
		cancel()
		if err == nil {
			w.add(leaseRecord{Process: 2, Kind: kindCanary, Member: -1, Start: int64(start), End: int64(end), Result: resultOK})
		}
	}
}

// watching is the leases still observed: put answered, not yet gone for
// afterGoneFor, deadline not passed.
func (w *leaseExpiry) watching() (live []*expiryLease, done bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	for _, l := range w.leases {
		if now.After(l.deadline) || !l.goneAt.IsZero() && now.Sub(l.goneAt) > afterGoneFor {
			continue
		}
		live = append(live, l)
	}
	return live, !w.granting && len(live) == 0
}

// poll reads the keys' prefix through one member every pollEvery until
// every lease is resolved (granting stopped).
func (w *leaseExpiry) poll(ctx context.Context, member int, c *clientv3.Client) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(pollEvery):
		}
		live, done := w.watching()
		if done {
			return
		}
		if len(live) == 0 {
			continue
		}
		octx, cancel := context.WithTimeout(ctx, time.Second)
		start := w.now()
		resp, err := c.Get(octx, leasePrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		end := w.now()
		cancel()
		if err != nil {
			continue
		}
		found := map[string]bool{}
		for _, kv := range resp.Kvs {
			found[string(kv.Key)] = true
		}
		for _, l := range live {
			w.mu.Lock()
			lost := l.putLost
			w.mu.Unlock()
			if lost {
				w.timeToLive(ctx, member, c, l)
			}
			w.mu.Lock()
			acked := l.putAcked
			if found[l.key] {
				l.lastFound = max(l.lastFound, start)
			} else if acked != 0 && acked < start && (l.firstAbsent == 0 || end < l.firstAbsent) {
				l.firstAbsent = end
			}
			w.mu.Unlock()
			if !found[l.key] && (acked == 0 || acked >= start) {
				continue // absent before its put: no evidence
			}
			w.add(leaseRecord{Process: 10 + member, Kind: kindLeaseGet, Member: member, Key: l.key, Lease: l.id,
				Start: int64(start), End: int64(end), Result: resultOK, Found: found[l.key]})
			if !found[l.key] {
				w.gone(l)
			}
		}
	}
}

// timeToLive asks for a lease's TTL (-1: gone) through one member.
func (w *leaseExpiry) timeToLive(ctx context.Context, member int, c *clientv3.Client, l *expiryLease) {
	octx, cancel := context.WithTimeout(ctx, time.Second)
	start := w.now()
	resp, err := c.TimeToLive(octx, clientv3.LeaseID(l.id))
	end := w.now()
	cancel()
	if err != nil {
		return
	}
	w.add(leaseRecord{Process: 10 + member, Kind: kindTTL, Member: member, Key: l.key, Lease: l.id,
		Start: int64(start), End: int64(end), Result: resultOK, TTL: resp.TTL})
	if resp.TTL == -1 {
		w.gone(l)
	}
}

func (w *leaseExpiry) gone(l *expiryLease) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if l.goneAt.IsZero() {
		l.goneAt = time.Now()
	}
}

// watch records every event of the keys' prefix on one member, from
// revision 1, resuming after the last event it saw when the stream
// breaks.
func (w *leaseExpiry) watch(ctx context.Context, member int, c *clientv3.Client) {
	next := int64(1)
	for ctx.Err() == nil {
		wch := c.Watch(clientv3.WithRequireLeader(ctx), leasePrefix, clientv3.WithPrefix(), clientv3.WithRev(next))
		for resp := range wch {
			at := w.now()
			if resp.CompactRevision > next {
				next = resp.CompactRevision
			}
			for _, ev := range resp.Events {
				r := leaseRecord{Process: 20 + member, Kind: kindWatch, Member: member, Key: string(ev.Kv.Key),
					Value: string(ev.Kv.Value), Rev: ev.Kv.ModRevision, Start: int64(at), End: int64(at), Result: resultOK, Event: "put"}
				if ev.Type == clientv3.EventTypeDelete {
					r.Event = "delete"
					w.mu.Lock()
					if d, ok := w.deletes[r.Key]; !ok || at < d.at {
						w.deletes[r.Key] = deleteSeen{rev: ev.Kv.ModRevision, at: at}
					}
					l := w.byKey[r.Key]
					w.mu.Unlock()
					if l != nil {
						w.gone(l)
					}
				}
				w.add(r)
				next = ev.Kv.ModRevision + 1
			}
			if resp.Err() != nil {
				break
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// status records each member's leader and term when they change.
func (w *leaseExpiry) status(ctx context.Context, member int, c *clientv3.Client) {
	var leader, term uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(statusEvery):
		}
		octx, cancel := context.WithTimeout(ctx, time.Second)
		start := w.now()
		resp, err := c.Status(octx, c.Endpoints()[0])
		end := w.now()
		cancel()
		if err != nil || resp.Leader == 0 || resp.Leader == leader && resp.RaftTerm == term {
			continue
		}
		leader, term = resp.Leader, resp.RaftTerm
		w.add(leaseRecord{Process: 30 + member, Kind: kindStatus, Member: member, Start: int64(start), End: int64(end),
			Result: resultOK, Leader: leader, Term: term})
	}
}

// stopGranting ends the grants (etcd's traffic has ended) and waits for
// the last grant to return, so the recording client's report is final.
func (w *leaseExpiry) stopGranting() {
	close(w.stopGrant)
	for {
		w.mu.Lock()
		g := w.granting
		w.mu.Unlock()
		if !g {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// finish waits until every lease was seen gone (for afterGoneFor) or its
// deadline passed, stops the workload and returns its history.
func (w *leaseExpiry) finish() []leaseRecord {
	w.observers.Wait()
	w.stop()
	_ = w.g.Wait()
	w.close()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.records
}

func (w *leaseExpiry) close() {
	if w.stop != nil {
		w.stop()
	}
	for _, c := range w.members {
		c.Close()
	}
	if w.all != nil {
		w.all.Close()
	}
	if w.rec != nil {
		w.rec.Close()
	}
}

// expiryReports is what etcd's checks need of the workload: the recording
// client's grants and puts, and a revoke for each expiry, up to revision
// upTo (the last one etcd's watchers saw; what came later no check of
// etcd's saw). A revoke's revision is its key's delete event's, as etcd's
// watchers or ours saw it. It is called when the last read that found the
// key began (else when the lease was granted) and returns when the first
// watcher saw the event or the first read that did not find the key
// returned, whichever came first: the expiry applied in between, and
// assumes nothing of when it was due. (Called at the grant, the revokes
// spanned seconds of other operations and porcupine's search took up to
// ten times as long.)
func (w *leaseExpiry) expiryReports(upTo int64, reports []report.ClientReport) []report.ClientReport {
	seen := map[string]deleteSeen{}
	w.mu.Lock()
	for k, d := range w.deletes {
		seen[k] = d
	}
	w.mu.Unlock()
	for _, r := range reports {
		for _, wo := range r.Watch {
			for _, resp := range wo.Responses {
				for _, ev := range resp.Events {
					if ev.Type != model.DeleteOperation || !strings.HasPrefix(ev.Key, leasePrefix) {
						continue
					}
					if d, ok := seen[ev.Key]; !ok || resp.Time < d.at {
						seen[ev.Key] = deleteSeen{rev: ev.Revision, at: resp.Time}
					}
				}
			}
		}
	}
	rec := w.rec.Report()
	var kept []porcupine.Operation
	for _, op := range rec.KeyValue {
		if resp := op.Output.(model.MaybeEtcdResponse); resp.Error == "" && resp.Revision > upTo {
			continue
		}
		kept = append(kept, op)
	}
	rec.KeyValue = kept
	revokes := report.ClientReport{ClientID: w.ids.NewClientID()}
	w.mu.Lock()
	defer w.mu.Unlock()
	for key, d := range seen {
		l := w.byKey[key]
		if l == nil || d.rev > upTo {
			continue
		}
		call, ret := max(l.grantAt, l.lastFound), d.at
		if l.firstAbsent != 0 {
			ret = min(ret, l.firstAbsent)
		}
		revokes.KeyValue = append(revokes.KeyValue, porcupine.Operation{
			ClientId: w.ids.NewStreamID(),
			Input:    model.EtcdRequest{Type: model.LeaseRevoke, LeaseRevoke: &model.LeaseRevokeRequest{LeaseID: l.id}},
			Call:     int64(call),
			Output:   model.MaybeEtcdResponse{EtcdResponse: model.EtcdResponse{Revision: d.rev, LeaseRevoke: &model.LeaseRevokeResponse{}}},
			Return:   int64(max(ret, call+1)),
		})
	}
	return []report.ClientReport{rec, revokes}
}

// leaseCheckResult is leasecheck's line (test/jepsen-lite/leasecheck).
type leaseCheckResult struct {
	Leases     int      `json:"leases"`
	Gone       int      `json:"gone"`
	NewTerm    int      `json:"new_term"`
	Violations []string `json:"violations"`
	Known      []string `json:"known"`
	Stats      []string `json:"stats"`
}

// checkLeases writes the history and runs leasecheck on it. On etcd a
// lease that outlived the bound is reported as known (-bound-advisory):
// etcd restarts every lease's TTL when a new leader takes over (its
// checkpoints are off by default), so after a leader change a lease may
// live up to a whole TTL longer.
func checkLeases(t *testing.T, records []leaseRecord, system string) (leaseCheckResult, error) {
	var res leaseCheckResult
	bin := os.Getenv("CORENODE_ROBUSTNESS_LEASECHECK")
	if bin == "" {
		return res, fmt.Errorf("CORENODE_ROBUSTNESS_LEASECHECK is not set (scripts/etcd-robustness sets it)")
	}
	dir := os.Getenv("CORENODE_ROBUSTNESS_LEASES")
	if dir == "" {
		dir = t.TempDir()
	}
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	path := filepath.Join(dir, name+".history.jsonl")
	f, err := os.Create(path)
	if err != nil {
		return res, err
	}
	enc := json.NewEncoder(f)
	for _, r := range records {
		if err := enc.Encode(r); err != nil {
			f.Close()
			return res, err
		}
	}
	if err := f.Close(); err != nil {
		return res, err
	}
	args := []string{"-history", path, "-prefix", leasePrefix, "-details", filepath.Join(dir, name+".leases.txt")}
	if system == "etcd" {
		args = append(args, "-bound-advisory")
	}
	out, err := exec.Command(bin, args...).Output()
	if jerr := json.Unmarshal(out, &res); jerr != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		return res, fmt.Errorf("leasecheck %v: %v %v %s", args, err, jerr, stderr)
	}
	t.Logf("lease expiry: %d leases, %d seen gone, %d after a new term began in their life; history %s", res.Leases, res.Gone, res.NewTerm, path)
	for _, s := range res.Stats {
		t.Logf("lease expiry: %s", s)
	}
	for _, k := range res.Known {
		t.Logf("lease expiry, etcd's known behaviour (a new leader restarts the TTL): %s", k)
	}
	return res, nil
}

// runScenarioWithLeases is etcd's runScenario (main_test.go) with the
// lease-expiry workload beside the traffic: it starts with the traffic,
// stops granting when the traffic ends, and goes on observing its last
// leases while etcd's checks run (wait returns its history). The reports
// include what etcd's checks need of it (expiryReports) up to revision upTo,
// the last one etcd's watchers saw.
func runScenarioWithLeases(ctx context.Context, t *testing.T, s scenarios.TestScenario, lg *zap.Logger, clus *e2e.EtcdProcessCluster) (reports []report.ClientReport, upTo int64, wait func() []leaseRecord) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g := errgroup.Group{}
	var operationReport, watchReport, failpointClientReport []report.ClientReport
	failpointInjected := make(chan report.FailpointInjection, 1)

	baseTime := time.Now()
	ids := identity.NewIDProvider()
	leases, err := startLeaseExpiry(context.WithoutCancel(ctx), lg, clus, baseTime, ids)
	if err != nil {
		t.Fatalf("starting the lease-expiry workload: %v", err)
	}
	g.Go(func() error {
		defer close(failpointInjected)
		time.Sleep(randomizeTime(WaitBeforeFailpoint, WaitJitter))
		fr, err := failpoint.Inject(ctx, t, lg, clus, s.Failpoint, baseTime, ids)
		if err != nil {
			t.Error(err)
			cancel()
		}
		time.Sleep(randomizeTime(WaitAfterFailpoint, WaitJitter))
		if fr != nil {
			failpointInjected <- fr.FailpointInjection
			failpointClientReport = fr.Client
		}
		return nil
	})
	maxRevisionChan := make(chan int64, 1)
	g.Go(func() error {
		defer close(maxRevisionChan)
		operationReport = traffic.SimulateTraffic(ctx, t, lg, clus, s.Profile, s.Traffic, failpointInjected, baseTime, ids)
		leases.stopGranting()
		maxRevision := operationsMaxRevision(operationReport)
		maxRevisionChan <- maxRevision
		lg.Info("Finished simulating Traffic", zap.Int64("max-revision", maxRevision))
		return nil
	})
	g.Go(func() error {
		watchReport = client.CollectClusterWatchEvents(ctx, t, clus, maxRevisionChan, s.Watch, baseTime, ids)
		return nil
	})
	g.Wait()
	reports = append(operationReport, append(failpointClientReport, watchReport...)...)
	upTo = operationsMaxRevision(operationReport)
	for _, r := range watchReport {
		for _, wo := range r.Watch {
			for _, resp := range wo.Responses {
				for _, ev := range resp.Events {
					upTo = max(upTo, ev.Revision)
				}
			}
		}
	}
	return append(reports, leases.expiryReports(upTo, watchReport)...), upTo, leases.finish
}
