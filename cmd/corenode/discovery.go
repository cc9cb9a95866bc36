package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// resolver is what DNS discovery asks; tests give their own.
type resolver interface {
	LookupSRV(ctx context.Context, service, proto, name string) (string, []*net.SRV, error)
	LookupHost(ctx context.Context, host string) ([]string, error)
}

// srvCluster is etcd's --discovery-srv: the initial cluster from the SRV
// records _etcd-server-ssl[-NAME]._tcp.DOMAIN (https) and
// _etcd-server[-NAME]._tcp.DOMAIN (http), as etcd's GetDNSClusterNames.
// The record that resolves to one of this member's advertised peer
// addresses is this member, named --name; the others are named 0, 1, ...
// as etcd names them. Member IDs derive from peer URLs, so this member's
// advertised URL must be the record's own form (its target name and port):
// the others know it by that.
func srvCluster(ctx context.Context, r resolver, domain, serviceName, name string, advertise []string, log *slog.Logger) (string, error) {
	suffix := ""
	if serviceName != "" {
		suffix = "-" + serviceName
	}
	self := map[string]string{} // resolved host:port -> advertised URL
	for _, a := range advertise {
		u, err := url.Parse(a)
		if err != nil {
			return "", fmt.Errorf("--initial-advertise-peer-urls %q: %w", a, err)
		}
		addrs, err := resolveHostPort(ctx, r, u.Host)
		if err != nil {
			return "", fmt.Errorf("--initial-advertise-peer-urls %q: %w", a, err)
		}
		for _, hp := range addrs {
			self[hp] = a
		}
	}
	var parts []string
	var errs []error
	temp := 0
	for _, svc := range []struct{ service, scheme string }{{"etcd-server-ssl" + suffix, "https"}, {"etcd-server" + suffix, "http"}} {
		_, srvs, err := r.LookupSRV(ctx, svc.service, "tcp", domain)
		if err != nil {
			errs = append(errs, fmt.Errorf("_%s._tcp.%s: %w", svc.service, domain, err))
			continue
		}
		for _, srv := range srvs {
			port := strconv.Itoa(int(srv.Port))
			peerURL := svc.scheme + "://" + net.JoinHostPort(strings.TrimSuffix(srv.Target, "."), port)
			addrs, err := resolveHostPort(ctx, r, net.JoinHostPort(srv.Target, port))
			if err != nil {
				errs = append(errs, err)
				continue
			}
			n := ""
			for _, a := range addrs {
				if adv, ok := self[a]; ok {
					n = name
					if adv != peerURL {
						return "", fmt.Errorf("--discovery-srv: the SRV record %s is this member, advertised as %s; advertise %s "+
							"(--initial-advertise-peer-urls), the form the other members know it by", peerURL, adv, peerURL)
					}
				}
			}
			if n == "" {
				n = strconv.Itoa(temp)
				temp++
			}
			log.Info("got bootstrap from DNS for etcd-server", "node", n+"="+peerURL)
			parts = append(parts, n+"="+peerURL)
		}
	}
	if len(parts) == 0 {
		return "", fmt.Errorf("--discovery-srv %s: no SRV records: %w", domain, errors.Join(errs...))
	}
	if !slices.ContainsFunc(parts, func(p string) bool { return strings.HasPrefix(p, name+"=") }) {
		return "", fmt.Errorf("--discovery-srv %s: cannot find local member %q in SRV records (none resolves to --initial-advertise-peer-urls %s)",
			domain, name, strings.Join(advertise, ","))
	}
	return strings.Join(parts, ","), nil
}

func resolveHostPort(ctx context.Context, r resolver, hostPort string) ([]string, error) {
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil {
		return nil, err
	}
	host = strings.TrimSuffix(host, ".")
	if net.ParseIP(host) != nil {
		return []string{net.JoinHostPort(host, port)}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ips, err := r.LookupHost(ctx, host)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = net.JoinHostPort(ip, port)
	}
	return out, nil
}
