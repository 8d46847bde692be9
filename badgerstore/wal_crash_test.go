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
	"github.com/idemkit/idem/badgerstore"
	"github.com/stretchr/testify/require"
)

// TestWALCrash_AcknowledgedWritesSurviveSIGKILL kills a child process that
// claims and completes keys from 32 goroutines, printing each key once its
// claim, and again once its result, is acknowledged. A durable write is
// answered as soon as the store's log is synced, before Badger holds it,
// so a kill lands between the two again and again; after every kill, the
// reopened store must hold every acknowledged claim and result. The child
// reserves fencing tokens 7 at a time (nextToken), so that kills land
// around the counter's writes: no token is ever handed out twice, and
// every round's tokens are above every token acknowledged before.
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
	claimed, done := map[string]uint64{}, map[string]bool{}
	owner := map[uint64]string{} // token -> the key whose claim got it
	var before uint64            // the highest token acknowledged in earlier rounds
	for round := range rounds {
		cmd := exec.Command(os.Args[0], "-test.run=^TestWALCrash_AcknowledgedWritesSurviveSIGKILL$", "-test.count=1")
		cmd.Env = append(os.Environ(), "IDEM_WALCRASH_DIR="+dir, fmt.Sprintf("IDEM_WALCRASH_ROUND=%d", round))
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		sc := bufio.NewScanner(out)
		lines := 0
		var top uint64
		for sc.Scan() {
			kind, key, ok := strings.Cut(sc.Text(), " ")
			if !ok {
				continue
			}
			switch kind {
			case "claimed":
				var token uint64
				key, tok, _ := strings.Cut(key, " ")
				_, err := fmt.Sscan(tok, &token)
				require.NoError(t, err, "round %d: %q", round, sc.Text())
				require.Greater(t, token, before, "round %d: %s got a token at or below one acknowledged before the kill", round, key)
				require.Empty(t, owner[token], "round %d: token %d handed out twice", round, token)
				owner[token], claimed[key] = key, token
				top = max(top, token)
			case "done":
				done[key] = true
			}
			// Kill mid-stream, at a point that moves from round to round.
			if lines++; lines == 300+97*round {
				require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
			}
		}
		_ = cmd.Wait()
		before = max(before, top)
		require.GreaterOrEqual(t, lines, 300+97*round, "round %d: the child stopped before it was killed", round)

		s, err := idem.Open(dir, &idem.Options{SweepInterval: -1, CloseTimeout: time.Millisecond})
		require.NoError(t, err, "round %d: reopen after SIGKILL", round)
		for k, token := range claimed {
			rec, err := s.Get(context.Background(), "", k)
			require.NoError(t, err, "round %d: acknowledged claim of %s lost", round, k)
			require.Equal(t, token, rec.Token, "round %d: %s", round, k)
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
	badgerstore.SetTokenBlock(7)
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
				say("claimed", fmt.Sprintf("%s %d", k, c.Token()))
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
