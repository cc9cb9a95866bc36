package transport

import "github.com/hashicorp/go-hclog"

// nullHCLog silences hashicorp's transport logger: its connection-level
// chatter duplicates what raft itself reports.
func nullHCLog() hclog.Logger { return hclog.NewNullLogger() }
