package member

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/corenode/corenode/transport"
)

// joinedID is the ID the cluster gave this member when an operator added
// it (etcdctl member add): a member started with --initial-cluster-state
// existing on an empty data dir asks the other members of --initial-cluster
// for the member list and takes the ID of the member whose peer URLs are
// its own, as etcd does. The token plays no part, so a member joins a
// cluster started with any --initial-cluster-token.
//
// It asks each of them in turn until one answers or wait has passed; a
// cluster that answers without such a member is a mistake to report at
// once, before the member holds any state.
func joinedID(peers *transport.PeerMux, cfg Config, electionTimeout time.Duration) (uint64, error) {
	initial, err := ParseInitialCluster(cfg.InitialCluster)
	if err != nil {
		return 0, err
	}
	var addrs []string
	for name, urls := range initial {
		if name == cfg.Name {
			continue
		}
		for _, u := range urls {
			if hp, err := hostPort(u); err == nil && !slices.Contains(cfg.InitialAdvertisePeerURLs, u) {
				addrs = append(addrs, hp)
			}
		}
	}
	if len(addrs) == 0 {
		return 0, errors.New("--initial-cluster-state existing: --initial-cluster names no other member to ask for this member's ID")
	}
	slices.Sort(addrs)
	ctx, cancel := context.WithTimeout(context.Background(), max(10*time.Second, 5*electionTimeout))
	defer cancel()
	var errs []error
	for {
		for _, addr := range addrs {
			actx, acancel := context.WithTimeout(ctx, 2*time.Second)
			members, err := transport.AskMembers(actx, peers, addr)
			acancel()
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for _, m := range members {
				if slices.ContainsFunc(m.PeerURLs, func(u string) bool { return slices.Contains(cfg.InitialAdvertisePeerURLs, u) }) {
					return m.ID, nil
				}
			}
			var known []string
			for _, m := range members {
				known = append(known, strings.Join(m.PeerURLs, ","))
			}
			return 0, fmt.Errorf("--initial-cluster-state existing: the cluster has no member with peer URL %s (its members: %s); "+
				"add it first: etcdctl member add %s --peer-urls=%s",
				strings.Join(cfg.InitialAdvertisePeerURLs, ","), strings.Join(known, " "), cfg.Name, strings.Join(cfg.InitialAdvertisePeerURLs, ","))
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("--initial-cluster-state existing: no member of --initial-cluster (%s) answered with the member list: %w",
				strings.Join(addrs, ", "), errors.Join(errs[max(0, len(errs)-len(addrs)):]...))
		case <-time.After(200 * time.Millisecond):
		}
	}
}
