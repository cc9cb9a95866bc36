package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/corenode/corenode/node"
)

// discoveryConfig is etcd's v3 discovery flags.
type discoveryConfig struct {
	endpoints                             []string
	token                                 string
	dialTimeout, requestTimeout           time.Duration
	keepaliveTime, keepaliveTimeout       time.Duration
	insecureTransport, insecureSkipVerify bool
	cert, key, cacert, user, password     string
	fallback                              string
}

// hasRaftLog reports whether dataDir holds a member already: discovery,
// as etcd's, is for a member's first start only.
func hasRaftLog(dataDir string) bool {
	for _, f := range []string{"wal", "raft.db", "wal-dir"} {
		if _, err := os.Stat(filepath.Join(dataDir, f)); err == nil {
			return true
		}
	}
	return false
}

// v3Discovery is etcd's v3 discovery (--discovery-endpoints,
// --discovery-token): this member registers under
// /_etcd/registry/TOKEN/members/ID on the discovery cluster, waits until
// /_etcd/registry/TOKEN/_config/size members have, and takes the first
// that many (by registration) as the initial cluster, as etcd does.
func v3Discovery(ctx context.Context, d discoveryConfig, name, token string, advertise []string, log *slog.Logger) (string, error) {
	if d.fallback != "exit" {
		return "", fmt.Errorf("--discovery-fallback %q: only exit, as in etcd 3.6", d.fallback)
	}
	if d.token == "" {
		return "", errors.New("--discovery-endpoints needs --discovery-token")
	}
	cfg := clientv3.Config{Endpoints: d.endpoints, DialTimeout: d.dialTimeout, DialKeepAliveTime: d.keepaliveTime,
		DialKeepAliveTimeout: d.keepaliveTimeout, Username: d.user, Password: d.password, Logger: zap.NewNop()}
	if u, p, ok := strings.Cut(d.user, ":"); ok && d.password == "" {
		cfg.Username, cfg.Password = u, p
	}
	if !d.insecureTransport {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: d.insecureSkipVerify}
		if d.cacert != "" {
			pem, err := os.ReadFile(d.cacert)
			if err != nil {
				return "", fmt.Errorf("--discovery-cacert: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return "", fmt.Errorf("--discovery-cacert %s: no PEM certificates in it", d.cacert)
			}
		}
		if d.cert != "" || d.key != "" {
			pair, err := tls.LoadX509KeyPair(d.cert, d.key)
			if err != nil {
				return "", fmt.Errorf("--discovery-cert/--discovery-key: %w", err)
			}
			tc.Certificates = []tls.Certificate{pair}
		}
		cfg.TLS = tc
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return "", fmt.Errorf("discovery: %w", err)
	}
	defer cli.Close()
	prefix := path.Join("/_etcd/registry", d.token)
	members := path.Join(prefix, "members")
	self := path.Join(members, fmt.Sprintf("%x", node.MemberID(advertise, token)))
	var parts []string
	for _, u := range advertise {
		parts = append(parts, name+"="+u)
	}
	op := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, d.requestTimeout) }

	c, cancel := op()
	resp, err := cli.Get(c, path.Join(prefix, "_config/size"))
	cancel()
	if err != nil {
		return "", fmt.Errorf("discovery: get the cluster size: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return "", fmt.Errorf("discovery: size key not found (%s/_config/size)", prefix)
	}
	size, err := strconv.Atoi(string(resp.Kvs[0].Value))
	if err != nil || size < 1 {
		return "", fmt.Errorf("discovery: bad size key %q", resp.Kvs[0].Value)
	}
	list := func() (*clientv3.GetResponse, error) {
		c, cancel := op()
		defer cancel()
		resp, err := cli.Get(c, members+"/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		if err != nil {
			return nil, fmt.Errorf("discovery: list the members: %w", err)
		}
		return resp, nil
	}
	inFirst := func(resp *clientv3.GetResponse) bool {
		return slices.ContainsFunc(resp.Kvs[:min(size, len(resp.Kvs))], func(kv *mvccpb.KeyValue) bool { return string(kv.Key) == self })
	}
	// As etcd: a full cluster is refused before registering.
	if resp, err := list(); err != nil {
		return "", err
	} else if len(resp.Kvs) >= size && !inFirst(resp) {
		return "", errors.New("discovery: cluster is full")
	}
	c, cancel = op()
	_, err = cli.Put(c, self, strings.Join(parts, ","))
	cancel()
	if err != nil {
		return "", fmt.Errorf("discovery: register this member: %w", err)
	}
	log.Info("register member itself successfully", "key", self)
	for {
		resp, err := list()
		if err != nil {
			return "", err
		}
		if len(resp.Kvs) >= size {
			if !inFirst(resp) {
				return "", errors.New("discovery: cluster is full")
			}
			var cluster []string
			for _, kv := range resp.Kvs[:size] {
				cluster = append(cluster, string(kv.Value))
			}
			log.Info("found all needed peers from discovery service", "cluster", strings.Join(cluster, ","))
			return strings.Join(cluster, ","), nil
		}
		log.Info("waiting for peers from discovery service", "found", len(resp.Kvs), "size", size)
		// Wait for the next registration, then count again.
		wctx, wcancel := context.WithCancel(ctx)
		w := cli.Watch(clientv3.WithRequireLeader(wctx), members+"/", clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
		select {
		case <-w:
		case <-ctx.Done():
		}
		wcancel()
		if ctx.Err() != nil {
			return "", fmt.Errorf("discovery: waiting for %d members: %w", size, ctx.Err())
		}
	}
}
