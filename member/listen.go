package member

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
)

// SocketOpts are etcd's socket options for every listener a member opens.
type SocketOpts struct {
	// ReusePort sets SO_REUSEPORT, ReuseAddress SO_REUSEADDR.
	ReusePort, ReuseAddress bool
}

// listen opens a TCP listener on hostPort with the socket options.
func (o SocketOpts) listen(hostPort string) (net.Listener, error) {
	lc := net.ListenConfig{Control: o.control}
	return lc.Listen(context.Background(), "tcp", hostPort)
}

// listenURL opens a client-side listener for a URL: TCP for http:// and
// https://, a Unix socket for etcd's unix:// and unixs://, whose socket
// file is the URL's host and path (unix://localhost:2379 is the file
// "localhost:2379"), replaced if it exists, as etcd does.
func (o SocketOpts) listenURL(rawURL string) (net.Listener, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("bad URL %q: %w", rawURL, err)
	}
	if u.Scheme == "unix" || u.Scheme == "unixs" {
		path := u.Host + u.Path
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("unix socket %s: %w", path, err)
		}
		return net.Listen("unix", path)
	}
	hp, err := hostPort(rawURL)
	if err != nil {
		return nil, err
	}
	return o.listen(hp)
}

// listenHTTP opens the HTTP-only listeners of urls (etcd's
// --listen-client-http-urls, --listen-metrics-urls): https:// ones with
// the client TLS settings, speaking HTTP/1.1 only.
func listenHTTP(cfg Config, urls []string, flagName string) ([]net.Listener, error) {
	var lns []net.Listener
	fail := func(err error) ([]net.Listener, error) {
		for _, ln := range lns {
			ln.Close()
		}
		return nil, err
	}
	var tlsCfg *tls.Config
	for _, u := range urls {
		var err error
		if isHTTPS(u) && tlsCfg == nil {
			if cfg.ClientTLS.CertFile == "" {
				return fail(errors.New(flagName + " " + u + " is https:// but --cert-file is not set"))
			}
			if tlsCfg, err = cfg.ClientTLS.serverConfig(""); err != nil {
				return fail(err)
			}
			tlsCfg = tlsCfg.Clone()
			tlsCfg.NextProtos = []string{"http/1.1"}
		}
		ln, err := cfg.SocketOpts.listenURL(u)
		if err != nil {
			return fail(fmt.Errorf("%s: %w", flagName, err))
		}
		if isHTTPS(u) {
			ln = tls.NewListener(ln, tlsCfg)
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

// httpElsewhere answers HTTP on the client URLs once
// --listen-client-http-urls moved it, as etcd stops serving it there.
var httpElsewhere = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	http.Error(w, "HTTP is served on --listen-client-http-urls, not on this client URL", http.StatusNotFound)
})

// accessControl is etcd's HTTP access controller: a request over plain
// HTTP must name an allowed Host (--host-whitelist, against DNS rebinding,
// CVE-2018-5702), and only the allowed origins (--cors) get CORS headers.
// Empty lists, or "*", allow all, as etcd's defaults do; the gateway's own
// CORS headers (transport's withCORS, etcd's "*") then stand.
func accessControl(next http.Handler, cors, hosts []string, log *slog.Logger) http.Handler {
	allowAll := func(l []string) bool { return len(l) == 0 || slices.Contains(l, "*") }
	anyOrigin, anyHost := allowAll(cors), allowAll(hosts)
	if anyOrigin && anyHost {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil && !anyHost {
			host := r.Host
			if h, _, err := net.SplitHostPort(host); err == nil {
				host = h
			}
			if !slices.Contains(hosts, host) {
				log.Warn("rejecting HTTP request to prevent DNS rebinding attacks", "host", r.Host)
				http.Error(w, fmt.Sprintf("corenode received your request, but the Host header %q is not in --host-whitelist; "+
					"add it, or use TLS (CVE-2018-5702)", r.Host), http.StatusMisdirectedRequest)
				return
			}
		}
		if anyOrigin {
			next.ServeHTTP(w, r)
			return
		}
		origin := r.Header.Get("Origin")
		if !slices.Contains(cors, origin) {
			origin = ""
		}
		next.ServeHTTP(&corsWriter{ResponseWriter: w, origin: origin}, r)
	})
}

// corsWriter puts the CORS headers --cors allows in place of the ones the
// handler set, as the answer's header is written.
type corsWriter struct {
	http.ResponseWriter
	origin string
	done   bool
}

func (c *corsWriter) fix() {
	if c.done {
		return
	}
	c.done = true
	h := c.Header()
	for _, k := range []string{"Access-Control-Allow-Methods", "Access-Control-Allow-Origin", "Access-Control-Allow-Headers"} {
		h.Del(k)
	}
	if c.origin != "" {
		h.Set("Access-Control-Allow-Methods", "POST, GET, OPTIONS, PUT, DELETE")
		h.Set("Access-Control-Allow-Origin", c.origin)
		h.Set("Access-Control-Allow-Headers", "accept, content-type, authorization")
	}
}

func (c *corsWriter) WriteHeader(code int) { c.fix(); c.ResponseWriter.WriteHeader(code) }

func (c *corsWriter) Write(b []byte) (int, error) { c.fix(); return c.ResponseWriter.Write(b) }

// Flush keeps the gateway's streams (watch) flowing.
func (c *corsWriter) Flush() {
	c.fix()
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (c *corsWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// slowRequests logs slow unary calls as etcd does: past
// --warning-unary-request-duration "request stats", and, for the KV calls
// its apply path serves, past --warning-apply-duration "apply request
// took too long". Zero turns either off.
func slowRequests(unary, apply time.Duration, log *slog.Logger) grpc.ServerOption {
	return grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := h(ctx, req)
		took := time.Since(start)
		method := strings.TrimPrefix(info.FullMethod, "/etcdserverpb.")
		if apply > 0 && took > apply && strings.HasPrefix(method, "KV/") {
			log.Warn("apply request took too long", "took", took, "expected-duration", apply, "request", method, "err", err)
		}
		if unary > 0 && took > unary {
			remote := ""
			if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
				remote = p.Addr.String()
			}
			log.Warn("request stats", "start time", start, "time spent", took, "remote", remote, "response type", method, "err", err)
		}
		return resp, err
	})
}
