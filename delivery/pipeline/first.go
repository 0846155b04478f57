package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/trustsync/trustsync/delivery/certificate"
	"github.com/trustsync/trustsync/delivery/render"
)

// Lister is what FirstSync waits on: the sources' first lists (watch.Set).
type Lister interface {
	WaitSynced(ctx context.Context) bool
	NotSynced() []error
}

// FirstSync writes the files once, before the app may start, the same for the
// sidecar's init and the agent's publish: it waits for the sources to list (until
// ctx ends; within says how long that is and what sets it, for the message),
// obtains the workload certificate when cert (nil without one) holds none yet, and
// fails, saying why, when nothing could be written or a required file could not be.
func (p *Pipeline) FirstSync(ctx context.Context, sources Lister, cert *certificate.Manager, within string) error {
	if !sources.WaitSynced(ctx) {
		return fmt.Errorf("could not read every source within %s: %w", within, errors.Join(sources.NotSynced()...))
	}
	if cert != nil && cert.Files() == nil {
		install := func(_ context.Context, files map[string]render.File) error { return p.Install(files) }
		if err := cert.Obtain(ctx, install); err != nil {
			return fmt.Errorf("workload certificate: %w", err)
		}
	}
	w := p.Sync()
	if w.WriteErr != nil {
		return fmt.Errorf("cannot write the files: %w", w.WriteErr)
	}
	var missing []string
	for _, path := range p.cfg.Plan.Required() {
		if err, failed := w.Failed[path]; failed {
			missing = append(missing, fmt.Sprintf("%s: %v", path, err))
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return errors.New(strings.Join(missing, "; "))
	}
	return nil
}
