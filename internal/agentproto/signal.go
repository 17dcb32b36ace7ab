package agentproto

import (
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/errdefs"
)

// ParseSignal accepts "SIGTERM", "TERM", "term" or a number.
func ParseSignal(s string) (unix.Signal, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 || n > 64 {
			return 0, errdefs.New(errdefs.ErrInvalidArgument, "unknown signal %q", s)
		}
		return unix.Signal(n), nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	sig := unix.SignalNum(name)
	if sig == 0 {
		return 0, errdefs.New(errdefs.ErrInvalidArgument, "unknown signal %q", s)
	}
	return sig, nil
}
