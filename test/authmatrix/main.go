// Command authmatrix prints what every etcd v3 RPC answers each of four
// callers on a fresh cluster with auth enabled (see internal/authmatrix).
// Run it against a fresh etcd 3.6 to remake member's reference table:
//
//	go run ./test/authmatrix -endpoints http://127.0.0.1:2379 > member/testdata/authmatrix.golden
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/corenode/corenode/internal/authmatrix"
)

func main() {
	endpoints := flag.String("endpoints", "http://127.0.0.1:2379", "comma-separated client URLs of a fresh cluster (its auth state is changed)")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfg := clientv3.Config{Endpoints: strings.Split(*endpoints, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	la, lb, err := authmatrix.Setup(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	rows, err := authmatrix.Run(ctx, cfg, la, lb)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Print(authmatrix.Format(rows))
}
