package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// etcdctl's -w json output is the JSON encoding of the Go client's response
// types (etcd 3.4): []byte fields are base64, PUT event types are omitted
// (zero value). Only the fields the test asserts on are declared.

type header struct {
	ClusterID uint64 `json:"cluster_id"`
	MemberID  uint64 `json:"member_id"`
	Revision  int64  `json:"revision"`
	RaftTerm  uint64 `json:"raft_term"`
}

type keyValue struct {
	Key            []byte `json:"key"`
	Value          []byte `json:"value"`
	CreateRevision int64  `json:"create_revision"`
	ModRevision    int64  `json:"mod_revision"`
	Version        int64  `json:"version"`
}

type rangeResponse struct {
	Header header     `json:"header"`
	KVs    []keyValue `json:"kvs"`
	More   bool       `json:"more"`
	Count  int64      `json:"count"`
}

type putResponse struct {
	Header header `json:"header"`
}

type watchResponse struct {
	Header header `json:"Header"`
	Events []struct {
		Type int      `json:"type"` // 0 PUT, 1 DELETE
		KV   keyValue `json:"kv"`
	} `json:"Events"`
}

type memberListResponse struct {
	Header  header `json:"header"`
	Members []struct {
		ID         uint64   `json:"ID"`
		Name       string   `json:"name"`
		PeerURLs   []string `json:"peerURLs"`
		ClientURLs []string `json:"clientURLs"`
		IsLearner  bool     `json:"isLearner"`
	} `json:"members"`
}

type endpointStatus struct {
	Endpoint string `json:"Endpoint"`
	Status   struct {
		Header    header   `json:"header"`
		Version   string   `json:"version"`
		Leader    uint64   `json:"leader"`
		RaftIndex uint64   `json:"raftIndex"`
		RaftTerm  uint64   `json:"raftTerm"`
		Errors    []string `json:"errors"`
	} `json:"Status"`
}

func decodeJSON[T any](t *testing.T, what, out string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%s: cannot decode etcdctl's JSON: %v\n%s", what, err, out)
	}
	return v
}

// watchEvents renders the events of etcdctl watch -w json output (one
// response per line) as "PUT key=value" / "DELETE key" lines.
func watchEvents(out string) ([]string, error) {
	var events []string
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		var r watchResponse
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return events, fmt.Errorf("line %q: %w", line, err)
		}
		for _, e := range r.Events {
			switch e.Type {
			case 0:
				events = append(events, fmt.Sprintf("PUT %s=%s", e.KV.Key, e.KV.Value))
			case 1:
				events = append(events, fmt.Sprintf("DELETE %s", e.KV.Key))
			default:
				events = append(events, fmt.Sprintf("type%d %s", e.Type, e.KV.Key))
			}
		}
	}
	return events, nil
}

// leaderOf checks that every endpoint names the same leader and that
// exactly one endpoint reports itself as that leader.
func leaderOf(c *cluster, st []endpointStatus) (uint64, *member, error) {
	var leader uint64
	var leaders []*member
	for _, s := range st {
		if s.Status.Leader == 0 {
			return 0, nil, fmt.Errorf("%s reports no leader: %+v", s.Endpoint, s.Status)
		}
		if leader != 0 && s.Status.Leader != leader {
			return 0, nil, fmt.Errorf("endpoints disagree on the leader: %x vs %x (%+v)", leader, s.Status.Leader, st)
		}
		leader = s.Status.Leader
		if s.Status.Header.MemberID == s.Status.Leader {
			leaders = append(leaders, c.byClientURL(s.Endpoint))
		}
	}
	if len(leaders) != 1 {
		return 0, nil, fmt.Errorf("want exactly one endpoint that is the leader %x, got %d: %+v", leader, len(leaders), st)
	}
	return leader, leaders[0], nil
}

func (c *cluster) statusOf(eps []string) ([]endpointStatus, error) {
	r := ctl(eps, "", append(slices.Clone(c.ctlFlags), "endpoint", "status", "-w", "json")...)
	if r.err != nil {
		return nil, fmt.Errorf("etcdctl endpoint status: %v", r)
	}
	var st []endpointStatus
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		return nil, fmt.Errorf("endpoint status: cannot decode etcdctl's JSON: %v\n%s", err, r.stdout)
	}
	if len(st) != len(eps) {
		return nil, fmt.Errorf("endpoint status: want %d endpoints, got %d: %s", len(eps), len(st), r.stdout)
	}
	return st, nil
}

func (c *cluster) status(t *testing.T, eps []string) []endpointStatus {
	t.Helper()
	st, err := c.statusOf(eps)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// memberIDs maps each member to the ID its own endpoint reports.
func (c *cluster) memberIDs(t *testing.T) map[*member]uint64 {
	t.Helper()
	ids := map[*member]uint64{}
	for _, s := range c.status(t, c.endpoints()) {
		ids[c.byClientURL(s.Endpoint)] = s.Status.Header.MemberID
	}
	return ids
}
