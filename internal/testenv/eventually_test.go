package testenv

import (
	"errors"
	"testing"
	"time"
)

func TestEventuallyWaitsForTheCondition(t *testing.T) {
	calls := 0
	Eventually(t, 10*time.Second, func() error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if calls != 3 {
		t.Fatalf("cond called %d times, want 3 (until it held)", calls)
	}
}

func TestPollGivesUpWithTheLastError(t *testing.T) {
	calls := 0
	err := poll(100*time.Millisecond, func() error {
		calls++
		return errors.New("never")
	})
	if err == nil || err.Error() != "never" {
		t.Fatalf("poll = %v, want the condition's error", err)
	}
	if calls < 2 {
		t.Fatalf("cond asked %d times in its bound, want it asked again", calls)
	}
}
