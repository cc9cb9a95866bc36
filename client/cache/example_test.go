package cache_test

import (
	"context"
	"fmt"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/corenode/corenode/client/cache"
)

func Example() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"localhost:2379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	c, err := cache.New(cli, cache.WithMaxKeys(1000))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The first Get asks the leader; later ones are answered from memory
	// while the leader's lease on the key holds.
	for range 3 {
		kv, err := c.Get(ctx, "/config/feature-x")
		if err != nil {
			log.Fatal(err)
		}
		if kv == nil {
			fmt.Println("feature-x is not set")
			continue
		}
		fmt.Printf("feature-x = %s\n", kv.Value)
	}
	s := c.Stats()
	fmt.Printf("%d hits, %d misses\n", s.Hits, s.Misses)
}
