// Package e2e holds the end-to-end test: the corenode binary, three real
// processes on loopback, driven by etcdctl as an operator would drive etcd.
// Run it with scripts/test (which installs etcdctl) or
//
//	go test -race -count=1 -v ./test/e2e/
package e2e
