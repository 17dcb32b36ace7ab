package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
)

// The bounds TestHostileGuestHost holds spaced to while one guest attacks
// it. They are generous on purpose: a 2-core TCG machine shared with other
// tests moves RSS by tens of MiB and exec round trips by a factor of two
// on its own; what they catch is growth with the attack (the issue measured
// +104 MiB in 25 s for 8 endless headers, 368,819 goroutines in 2 s of
// pings).
const (
	hostileRSSGrowth  = 64 << 20 // spaced's RSS, and its heap in use, over their calm values, at any sample
	hostileGoroutines = 500      // spaced's goroutines over its calm count, at any sample
	hostileSlowdown   = 3        // the other tenant's median exec round trip over its calm median
	attackFor         = 15 * time.Second

	// Past these the test stops the attack itself (kills the hostile VM by
	// PID): the machine is shared, and an unbounded spaced must fail the
	// test, not take the host's memory.
	brakeRSSGrowth  = 512 << 20
	brakeGoroutines = 100_000
)

// TestHostileGuestHost runs the hostileguest program (e2e/hostileguest) in
// a sandbox, one attack per sub-test, against one spaced and one quiet
// sandbox of another tenant, and checks from outside that spaced stays
// bounded: its RSS and goroutines (read from --debug-listen) stay within
// hostileRSSGrowth and hostileGoroutines of their calm values, the other
// tenant's exec round trip within hostileSlowdown of its calm median, and
// the hostile sandbox is refused or throttled with a reason: a
// space_guest_budget_exhausted_total counter moved, or the sandbox failed.
func TestHostileGuestHost(t *testing.T) {
	// The network log holds the egress proxy's and DNS's records of what they refused.
	s := newServer(t, "--debug-listen", "127.0.0.1:0", "--feature", "network_log")
	s.start()
	dbg := s.debugURL()
	quietKey := newTenantKey(t, s, "quiet-tenant")
	hostileKey := newTenantKey(t, s, "hostile-tenant")
	quietSbx := s.client(quietKey).createSandbox(nil)
	// The harness's teardown deletes only the admin tenant's sandboxes.
	t.Cleanup(func() { s.client(quietKey).try("DELETE", "/v1/sandboxes/"+quietSbx.ID, nil) })
	quiet := &hostileClient{url: s.URL, key: quietKey}
	attacker := &hostileClient{url: s.URL, key: hostileKey}
	bin, err := os.ReadFile(filepath.Join(binDir, "hostileguest"))
	if err != nil {
		t.Fatal(err)
	}

	attacks := []struct {
		name string
		args string
		// The reason the host must give for refusing or throttling the
		// attack, any of: a space_guest_budget_exhausted_total whose label
		// holds one of budgets, a spaced log line matching logged during
		// the attack, a record of the sandbox's network log matching
		// audited, or the host failing the sandbox. None set: no check.
		budgets []string
		logged  *regexp.Regexp
		audited *regexp.Regexp
		link    bool // takes the agent link over: the sandbox answers no more
		poke    bool // exec in the hostile sandbox during the attack, for the host to read the agent's answers
		console bool // check the VM's console files stay bounded
	}{
		{name: "egress endless headers", args: "-conns 32 egress", budgets: []string{"egress"}, audited: regexp.MustCompile(`request header (too large|timeout)`)},
		{name: "dns flood", args: "-conns 512 -zone example.com dns", budgets: []string{"dns"}, audited: regexp.MustCompile(`too many DNS queries in flight|DNS connection limit`)},
		{name: "console flood", args: "console", console: true},
		{name: "link streams never accepted", args: "-conns 300 -delay 2s link-streams", budgets: []string{"stream", "link"}, logged: linkDropped, link: true},
		{name: "link lying agent", args: "-delay 2s link-lies", link: true, poke: true},
		{name: "link ping flood", args: "-delay 2s link-ping", budgets: []string{"ping", "link"}, logged: linkDropped, link: true},
	}
	for _, a := range attacks {
		t.Run(strings.ReplaceAll(a.name, " ", "_"), func(t *testing.T) {
			sbx := s.client(hostileKey).createSandbox(nil)
			deleted := false
			t.Cleanup(func() {
				if !deleted {
					s.client(hostileKey).try("DELETE", "/v1/sandboxes/"+sbx.ID, nil)
				}
			})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			if status, err := attacker.put(ctx, sbx.ID, "/root/hostileguest", bin); err != nil || status != 200 && status != 201 && status != 204 {
				t.Fatalf("upload hostileguest: %d %v", status, err)
			}
			if res, err := attacker.exec(ctx, sbx.ID, apiv1.CreateCommandRequest{Shell: "chmod 755 /root/hostileguest", TimeoutSeconds: 30}); err != nil || res.ExitCode == nil || *res.ExitCode != 0 {
				t.Fatalf("chmod hostileguest: %+v %v", res, err)
			}

			calm := quiet.latencies(t, quietSbx.ID, 7)
			base := getRuntime(t, dbg+"?gc=1")
			exhaustedBefore := s.budgetExhausted(t)
			logFrom := len(s.logTail(256 << 20))
			t.Logf("calm: spaced RSS %s, heap %s, %d goroutines; other tenant's exec median %v",
				mib(base.RSSBytes), mib(base.HeapInuseBytes), base.Goroutines, median(calm).Round(time.Millisecond))

			var cr apiv1.CommandResponse
			secs := int(attackFor/time.Second) + 30
			if _, err := attacker.call(ctx, "POST", "/v1/sandboxes/"+sbx.ID+"/commands", apiv1.CreateCommandRequest{
				Shell: fmt.Sprintf("/root/hostileguest -dur %s %s", attackFor, a.args), TimeoutSeconds: secs}, &cr); err != nil {
				t.Fatalf("start the attack: %v", err)
			}
			// A command starts on the first attach to its events: attach now,
			// and keep the stream (its exit ends the attack's window).
			attached := time.Now()
			started := make(chan struct{})
			output := make(chan string, 1)
			actx, acancel := context.WithTimeout(ctx, attackFor+2*time.Minute)
			defer acancel()
			go func() { output <- attacker.output(actx, sbx.ID, cr.Command.ID, started) }()
			select {
			case <-started:
			case <-time.After(time.Minute):
				t.Fatalf("the attack command did not start within a minute of its attach")
			}
			t0 := time.Now()
			t.Logf("attack started %v after its attach", t0.Sub(attached).Round(time.Millisecond))

			// Sample spaced and the console while the other tenant execs.
			peak := base
			var consolePeak int64
			var samples, sampleErrs int
			var lastErr error
			braked := ""
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(2)
			go func() {
				defer wg.Done()
				tick := time.NewTicker(250 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					if a.console {
						consolePeak = max(consolePeak, consoleBytes(s.dataDir, sbx.ID))
					}
					r, err := fetchRuntime(dbg)
					if err != nil {
						sampleErrs++
						lastErr = err
						continue
					}
					samples++
					peak.RSSBytes = max(peak.RSSBytes, r.RSSBytes)
					peak.HeapInuseBytes = max(peak.HeapInuseBytes, r.HeapInuseBytes)
					peak.Goroutines = max(peak.Goroutines, r.Goroutines)
					if braked == "" && (r.RSSBytes > base.RSSBytes+brakeRSSGrowth || r.Goroutines > base.Goroutines+brakeGoroutines) {
						braked = fmt.Sprintf("%v into the attack (RSS %s, %d goroutines)", time.Since(t0).Round(time.Millisecond), mib(r.RSSBytes), r.Goroutines)
						s.killSandboxVM(sbx.ID)
					}
				}
			}()
			var pokes, pokeErrs int
			var pokeLast string
			if a.poke {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						case <-time.After(250 * time.Millisecond):
						}
						pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
						res, err := attacker.exec(pctx, sbx.ID, apiv1.CreateCommandRequest{Shell: "echo hi", TimeoutSeconds: 5})
						pcancel()
						pokes++
						if err != nil {
							pokeErrs++
							pokeLast = err.Error()
						} else {
							pokeLast = fmt.Sprintf("%s %q", res.Reason, res.Stdout)
						}
					}
				}()
			}
			var during []time.Duration
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					during = append(during, quiet.latencies(t, quietSbx.ID, 1)...)
				}
			}()
			// The window: until the attacker's command ends (it stops itself
			// after attackFor, its watchdog 5 s later), or, for a link attack
			// whose agent is frozen and reports nothing, its delay and
			// attackFor after the start, and a few seconds for spaced to show
			// what it kept.
			var out string
			window := time.NewTimer(attackFor + 20*time.Second)
			if a.link {
				window.Reset(attackFor + 10*time.Second)
			}
			if a.link {
				// The host dropping the link ends the command's stream early;
				// the attack goes on, and so does the window.
				<-window.C
				select {
				case out = <-output:
				default:
				}
			} else {
				select {
				case out = <-output:
				case <-window.C:
				}
			}
			close(stop)
			wg.Wait()
			// Once more after the attack: growth that came late, or while
			// spaced was too busy to answer, shows here.
			if r, err := fetchRuntime(dbg); err == nil {
				samples++
				peak.RSSBytes = max(peak.RSSBytes, r.RSSBytes)
				peak.HeapInuseBytes = max(peak.HeapInuseBytes, r.HeapInuseBytes)
				peak.Goroutines = max(peak.Goroutines, r.Goroutines)
			}
			t.Logf("%d samples of spaced's figures over %v, %d failed (the last: %v)", samples, time.Since(t0).Round(time.Millisecond), sampleErrs, lastErr)
			exhaustedAfter := s.budgetExhausted(t)

			// What the attacker says it did (link attacks froze the agent:
			// their command never reports; they note it on the console).
			if a.poke {
				t.Logf("execs in the hostile sandbox during the attack: %d, %d failed, the last: %.300s", pokes, pokeErrs, pokeLast)
			}
			if out != "" {
				t.Logf("attacker: %s", strings.TrimSpace(out))
			}
			for _, l := range consoleNotes(s.dataDir, sbx.ID) {
				t.Logf("attacker (console): %s", l)
			}
			var after apiv1.Sandbox
			attacker.call(ctx, "GET", "/v1/sandboxes/"+sbx.ID, nil, &after)

			growth := int64(peak.RSSBytes) - int64(base.RSSBytes)
			heapGrowth := int64(peak.HeapInuseBytes) - int64(base.HeapInuseBytes)
			t.Logf("during the attack: spaced RSS peak %s (%+.1f MiB), heap peak %s (%+.1f MiB), goroutines peak %d (%+d); other tenant's exec median %v, max %v (%d execs); hostile sandbox %s %v",
				mib(peak.RSSBytes), float64(growth)/(1<<20), mib(peak.HeapInuseBytes), float64(heapGrowth)/(1<<20), peak.Goroutines, peak.Goroutines-base.Goroutines,
				medianOr(during), maxOr(during), len(during), after.State, after.LastError)
			if braked != "" {
				t.Errorf("the test stopped the attack itself (killed the hostile VM) %s: spaced grew without bound", braked)
			}
			if growth > hostileRSSGrowth {
				t.Errorf("spaced's RSS grew by %.1f MiB (%s → %s) during the attack, bound %d MiB",
					float64(growth)/(1<<20), mib(base.RSSBytes), mib(peak.RSSBytes), hostileRSSGrowth>>20)
			}
			if heapGrowth > hostileRSSGrowth {
				t.Errorf("spaced's heap in use grew by %.1f MiB (%s → %s) during the attack, bound %d MiB",
					float64(heapGrowth)/(1<<20), mib(base.HeapInuseBytes), mib(peak.HeapInuseBytes), hostileRSSGrowth>>20)
			}
			if peak.Goroutines > base.Goroutines+hostileGoroutines {
				t.Errorf("spaced's goroutines reached %d during the attack (%d calm), bound calm + %d", peak.Goroutines, base.Goroutines, hostileGoroutines)
			}
			if a.console && consolePeak > 4<<20 {
				t.Errorf("the hostile VM's console files reached %s on disk, bound 4 MiB", mib(uint64(consolePeak)))
			} else if a.console {
				t.Logf("console files peak %s", mib(uint64(consolePeak)))
			}
			moved := budgetsMoved(exhaustedBefore, exhaustedAfter)
			t.Logf("space_guest_budget_exhausted_total moved: %v", moved)
			if a.poke {
				// The lying agent claims its commands ended sandbox_deleted, a
				// reason only the host may give.
				var list apiv1.CommandList
				if _, err := attacker.call(ctx, "GET", "/v1/sandboxes/"+sbx.ID+"/commands?page_size=100", nil, &list); err != nil {
					t.Errorf("list the hostile sandbox's commands: %v", err)
				}
				states := map[string]int{}
				for _, c := range list.Commands {
					st := c.State
					if c.Exit != nil {
						st += "/" + c.Exit.Reason
					}
					states[st]++
					if c.Exit != nil && c.Exit.Reason == "sandbox_deleted" && after.State == "running" {
						t.Errorf("command %s of the running hostile sandbox ended %q: the host stored the guest's claim of a host-only reason", c.ID, c.Exit.Reason)
					}
				}
				t.Logf("the hostile sandbox's commands by state/reason: %v", states)
			}
			failedByHost := after.State == "failed" && braked == "" // not the test's own kill
			var reason string
			if a.logged != nil {
				if log := s.logTail(256 << 20); len(log) > logFrom {
					reason = string(a.logged.Find(log[logFrom:]))
				}
			}
			if a.audited != nil {
				var raw json.RawMessage
				if _, err := attacker.call(ctx, "GET", "/v1/sandboxes/"+sbx.ID+"/network/log", nil, &raw); err != nil {
					t.Errorf("network log of the hostile sandbox: %v", err)
				} else if m := a.audited.Find(raw); m != nil {
					reason = "network log: " + string(m)
				}
			}
			switch {
			case len(a.budgets) == 0 && a.logged == nil && a.audited == nil:
			case budgetMatched(moved, a.budgets):
			case failedByHost:
				t.Logf("the host failed the hostile sandbox: %+v", after.LastError)
			case reason != "":
				t.Logf("the host's reason: %s", reason)
			default:
				t.Errorf("the hostile sandbox was neither refused nor throttled: no space_guest_budget_exhausted_total{budget=~%v} counted (moved: %v), no spaced log line %v, no network log record %v, sandbox %s",
					a.budgets, moved, a.logged, a.audited, after.State)
			}
			t0 = time.Now()
			s.client(hostileKey).deleteSandbox(sbx.ID)
			deleted = true
			t.Logf("deleting the hostile sandbox took %v", time.Since(t0).Round(time.Millisecond))

			// The other tenant's calm round trip, measured before the attack
			// and again once the hostile sandbox is gone: the machine is
			// shared, and its load moves a median of 7 by 2-5x within a
			// minute on its own; the slower of the two calm medians is the
			// reference, so what is counted is the attack's, not the
			// machine's.
			calmAfter := quiet.latencies(t, quietSbx.ID, 7)
			ref := median(calm)
			if len(calmAfter) > 0 {
				ref = max(ref, median(calmAfter))
			}
			switch {
			case len(during) == 0:
				t.Errorf("no exec of the other tenant completed during the attack (calm median %v)", ref.Round(time.Millisecond))
			case median(during) > hostileSlowdown*ref:
				t.Errorf("the other tenant's exec median was %v during the attack, %.1f× its calm %v (before %v, after %v; bound %d×)",
					median(during).Round(time.Millisecond), float64(median(during))/float64(ref), ref.Round(time.Millisecond),
					median(calm).Round(time.Millisecond), medianOr(calmAfter), hostileSlowdown)
			default:
				t.Logf("the other tenant's exec median: %v during the attack, %.1f× its calm %v (before %v, after %v)",
					median(during).Round(time.Millisecond), float64(median(during))/float64(ref), ref.Round(time.Millisecond),
					median(calm).Round(time.Millisecond), medianOr(calmAfter))
			}
		})
	}
	s.client(quietKey).deleteSandbox(quietSbx.ID)
}

// linkDropped is spaced's record of dropping an agent link session whose
// guest broke the link's bounds (internal/agentclient).
var linkDropped = regexp.MustCompile(`level=WARN msg="agent link dropped[^"]*".*`)

// debugURL is the --debug-listen address spaced logged.
func (s *server) debugURL() string {
	s.t.Helper()
	m := regexp.MustCompile(`debug_listen=(\S+)`).FindSubmatch(s.logTail(1 << 20))
	if m == nil {
		s.t.Fatal("spaced logged no debug_listen address")
	}
	return "http://" + string(m[1]) + "/debug/runtime"
}

// debugRuntime is what spaced's GET /debug/runtime answers.
type debugRuntime struct {
	Goroutines     int    `json:"goroutines"`
	HeapInuseBytes uint64 `json:"heap_inuse_bytes"`
	RSSBytes       uint64 `json:"rss_bytes"`
}

func fetchRuntime(url string) (debugRuntime, error) {
	var d debugRuntime
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return d, err
	}
	defer resp.Body.Close()
	return d, json.NewDecoder(resp.Body).Decode(&d)
}

func getRuntime(t *testing.T, url string) debugRuntime {
	t.Helper()
	d, err := fetchRuntime(url)
	if err != nil {
		t.Fatalf("debug runtime: %v", err)
	}
	return d
}

var exhaustedRE = regexp.MustCompile(`(?m)^space_guest_budget_exhausted_total\{budget="([^"]*)"\} (\S+)$`)

// budgetExhausted reads space_guest_budget_exhausted_total by budget.
func (s *server) budgetExhausted(t *testing.T) map[string]float64 {
	t.Helper()
	resp := s.client(s.AdminKey).request("GET", "/metrics", nil, nil)
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if m := exhaustedRE.FindStringSubmatch(sc.Text()); m != nil {
			v, _ := strconv.ParseFloat(m[2], 64)
			out[m[1]] = v
		}
	}
	return out
}

func budgetsMoved(before, after map[string]float64) map[string]float64 {
	moved := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			moved[k] = d
		}
	}
	return moved
}

// budgetMatched says whether a moved budget's label contains one of want.
func budgetMatched(moved map[string]float64, want []string) bool {
	for k := range moved {
		for _, w := range want {
			if strings.Contains(k, w) {
				return true
			}
		}
	}
	return false
}

// consoleBytes is the size on disk of the console files of a sandbox's VM
// (the files whose name holds "console" under a directory naming it).
func consoleBytes(dataDir, sbx string) int64 {
	var n int64
	filepath.WalkDir(dataDir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.Contains(d.Name(), "console") || !strings.Contains(p, sbx) {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// consoleNotes are the lines hostileguest wrote to the kernel log, read
// from the VM's console files.
func consoleNotes(dataDir, sbx string) []string {
	var out []string
	filepath.WalkDir(dataDir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.Contains(d.Name(), "console") || !strings.Contains(p, sbx) {
			return nil
		}
		b, _ := os.ReadFile(p)
		for _, l := range strings.Split(string(b), "\n") {
			if i := strings.Index(l, "hostileguest: "); i >= 0 && !strings.Contains(l, "flood flood") {
				out = append(out, strings.TrimSpace(l[i:]))
			}
		}
		return nil
	})
	return out
}

var vmmPIDRE = regexp.MustCompile(`msg="sandbox started" .*sandbox=(\S+) .*vmm_pid=(\d+)`)

// killSandboxVM SIGKILLs the QEMU of one sandbox, by the PID spaced
// logged for it (a pooled VM's command line names the pool, not the
// sandbox), once that PID is seen to be a VMM of this data dir.
func (s *server) killSandboxVM(sbx string) {
	for _, m := range vmmPIDRE.FindAllSubmatch(s.logTail(64<<20), -1) {
		if string(m[1]) != sbx {
			continue
		}
		pid, _ := strconv.Atoi(string(m[2]))
		if slices.Contains(vmmPIDs(s.dataDir), pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// put uploads b to path in the sandbox.
func (h *hostileClient) put(ctx context.Context, sbx, path string, b []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, "PUT", h.url+"/v1/sandboxes/"+sbx+"/files?path="+path, strings.NewReader(string(b)))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+h.key)
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// output attaches to a command's events (which starts it), closes started
// on its start and returns its stdout and stderr once it exits or ctx ends.
func (h *hostileClient) output(ctx context.Context, sbx, cmd string, started chan struct{}) string {
	var once sync.Once
	defer once.Do(func() { close(started) })
	req, err := http.NewRequestWithContext(ctx, "GET", h.url+"/v1/sandboxes/"+sbx+"/commands/"+cmd+"/events", nil)
	if err != nil {
		return err.Error()
	}
	req.Header.Set("Authorization", "Bearer "+h.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	for sc.Scan() {
		var ev apiv1.Event
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		if ev.Type == apiv1.EventStarted {
			once.Do(func() { close(started) })
		}
		if ev.Data != nil && (ev.Type == apiv1.EventStdout || ev.Type == apiv1.EventStderr) && b.Len() < 64<<10 {
			b.WriteString(*ev.Data)
		}
		if ev.Type == apiv1.EventExit {
			fmt.Fprintf(&b, " (exit: %s)", ev.Reason)
			break
		}
	}
	return b.String()
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func medianOr(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return median(d).Round(time.Millisecond)
}

func maxOr(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return slices.Max(d).Round(time.Millisecond)
}
