package node

// StorageErr is why this member cannot persist its raft state (wrapping
// logstore.ErrCannotPersist), or nil when it can. While it is not nil the
// member neither leads nor campaigns, and falls behind the leader; the
// store's probe clears it once the disk takes writes again (package
// logstore, "Health and reopen").
func (n *Node) StorageErr() error { return n.health.Err() }

// StorageChange returns a channel closed at the next change of StorageErr
// between nil and not nil.
func (n *Node) StorageChange() <-chan struct{} { return n.health.Changed() }
