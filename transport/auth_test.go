package transport

import (
	"testing"

	"google.golang.org/grpc"
)

// TestMethodRulesCoverTheClientPort: every method the client port serves
// has its rule written down (an unlisted one would need root, silently),
// and the table names no method the port does not serve.
func TestMethodRulesCoverTheClientPort(t *testing.T) {
	g := grpc.NewServer()
	(&Server{}).Register(g)
	served := map[string]bool{}
	for svc, info := range g.GetServiceInfo() {
		for _, m := range info.Methods {
			served["/"+svc+"/"+m.Name] = true
		}
	}
	for m := range served {
		if _, ok := methodRules[m]; !ok {
			t.Errorf("%s has no rule in methodRules", m)
		}
	}
	for m := range methodRules {
		if !served[m] {
			t.Errorf("methodRules names %s, which the client port does not serve", m)
		}
	}
	if len(served) < 40 {
		t.Fatalf("only %d methods served: the services did not register", len(served))
	}
}
