// Package cachepb holds the read-lease cache protocol (cache.proto) and its
// generated code. Regenerate with `go generate ./api/cachepb` (needs protoc,
// Debian's protobuf-compiler; the Go plugins are pinned as tools in go.mod).
package cachepb

//go:generate sh -c "protoc --plugin=protoc-gen-go=$(go tool -n protoc-gen-go) --plugin=protoc-gen-go-grpc=$(go tool -n protoc-gen-go-grpc) --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative cache.proto"
