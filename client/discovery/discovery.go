package discovery

import (
	"encoding/json"
	"errors"
	"fmt"

	"go.etcd.io/etcd/client/v3/naming/endpoints"
)

// Key is the key of the endpoint addr of service: the key etcd's
// endpoints.Manager documents for it.
func Key(service, addr string) string { return service + "/" + addr }

// Prefix is the prefix every endpoint key of service starts with. A service
// whose name is another's followed by "/" (svc and svc/admin) shares its
// keys, as with etcd's manager; name services so that none is a prefix of
// another.
func Prefix(service string) string { return service + "/" }

// Decode reads a stored endpoint record. endpoints.Manager stores a record
// with an Op field besides Addr and Metadata; every record it stores is an
// addition, so the Op is not read.
func Decode(value []byte) (endpoints.Endpoint, error) {
	var ep endpoints.Endpoint
	if err := json.Unmarshal(value, &ep); err != nil {
		return endpoints.Endpoint{}, fmt.Errorf("decode endpoint record: %w", err)
	}
	if ep.Addr == "" {
		return endpoints.Endpoint{}, errors.New("decode endpoint record: no Addr")
	}
	return ep, nil
}
