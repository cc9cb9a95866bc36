// Package drift is the one definition of the drift margin: how long before
// the other side's earliest possible end of a lease (a TTL lease, a read
// lease, a read-lease horizon) a timer on this side treats it as over.
//
// Its contract is one pure function of a duration, the same on every
// member and every client: 1% of the duration plus 50 ms. Holders
// (client/election, client/cache) subtract it from their deadlines; a new
// leader (readlease) adds it to its predecessors' horizon before it trusts
// that their read leases have run out.
//
// It is a leaf: it imports only the standard library's time, so both the
// client packages (which depend on no server package) and the server side
// may import it. It must never import anything of corenode's.
package drift
