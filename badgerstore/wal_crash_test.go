package badgerstore_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/stretchr/testify/require"
)

// TestWALCrash_AcknowledgedWritesSurviveSIGKILL kills a child process that
// claims and completes keys from 32 goroutines, printing each key once its
// claim, and again once its result, is acknowledged. A durable write is
// answered as soon as the store's log is synced, before Badger holds it,
// so a kill lands between the two again and again; after every kill, the
// reopened store must hold every acknowledged claim and result.
func TestWALCrash_AcknowledgedWritesSurviveSIGKILL(t *testing.T) {
	if os.Getenv("IDEM_WALCRASH_DIR") != "" {
		walCrashChild()
		return
	}
	dir := t.TempDir()
	rounds := 8
	if testing.Short() {
		rounds = 3
	}
	claimed, done := map[string]bool{}, map[string]bool{}
	for round := range rounds {
		cmd := exec.Command(os.Args[0], "-test.run=^TestWALCrash_AcknowledgedWritesSurviveSIGKILL$", "-test.count=1")
		cmd.Env = append(os.Environ(), "IDEM_WALCRASH_DIR="+dir, fmt.Sprintf("IDEM_WALCRASH_ROUND=%d", round))
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		sc := bufio.NewScanner(out)
		lines := 0
		for sc.Scan() {
			kind, key, ok := strings.Cut(sc.Text(), " ")
			if !ok {
				continue
			}
			switch kind {
			case "claimed":
				claimed[key] = true
			case "done":
				done[key] = true
			}
			// Kill mid-stream, at a point that moves from round to round.
			if lines++; lines == 300+97*round {
				require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
			}
		}
		_ = cmd.Wait()
		require.GreaterOrEqual(t, lines, 300+97*round, "round %d: the child stopped before it was killed", round)

		s, err := idem.Open(dir, &idem.Options{SweepInterval: -1, CloseTimeout: time.Millisecond})
		require.NoError(t, err, "round %d: reopen after SIGKILL", round)
		for k := range claimed {
			rec, err := s.Get(context.Background(), "", k)
			require.NoError(t, err, "round %d: acknowledged claim of %s lost", round, k)
			if done[k] {
				require.Equal(t, backend.StateDone, rec.State, "round %d: acknowledged result of %s lost", round, k)
				require.Equal(t, k, string(rec.Result.Body))
			}
		}
		require.NoError(t, s.Close())
	}
	t.Logf("%d rounds: %d acknowledged claims and %d results all survived", rounds, len(claimed), len(done))
}

func walCrashChild() {
	s, err := idem.Open(os.Getenv("IDEM_WALCRASH_DIR"), &idem.Options{SweepInterval: -1, CloseTimeout: time.Millisecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(2)
	}
	var mu sync.Mutex
	w := bufio.NewWriter(os.Stdout)
	say := func(kind, key string) {
		mu.Lock()
		fmt.Fprintln(w, kind, key)
		w.Flush()
		mu.Unlock()
	}
	round := os.Getenv("IDEM_WALCRASH_ROUND")
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				k := fmt.Sprintf("r%s-g%d-%d", round, g, i)
				c, _, err := s.Begin(context.Background(), idem.Request{Key: k})
				if err != nil {
					fmt.Fprintln(os.Stderr, "child begin:", err)
					os.Exit(3)
				}
				say("claimed", k)
				if err := c.Complete(context.Background(), backend.Result{Status: 200, Body: []byte(k)}); err != nil {
					fmt.Fprintln(os.Stderr, "child complete:", err)
					os.Exit(3)
				}
				say("done", k)
			}
		}()
	}
	wg.Wait()
}
