package keylock

import (
	"runtime"
	"sync"
	"testing"
)

func TestSerialisesOneKey(t *testing.T) {
	var m Map
	var wg sync.WaitGroup
	inside, most := 0, 0
	var mu sync.Mutex
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			unlock := m.Lock("k")
			mu.Lock()
			inside++
			most = max(most, inside)
			mu.Unlock()
			runtime.Gosched() // let another holder in, if the lock would
			mu.Lock()
			inside--
			mu.Unlock()
			unlock()
		}()
	}
	wg.Wait()
	if most != 1 {
		t.Fatalf("%d holders of one key at once, want 1", most)
	}
	if n := m.Len(); n != 0 {
		t.Fatalf("%d entries left after every holder released, want 0", n)
	}
}

func TestKeysAreIndependent(t *testing.T) {
	var m Map
	unlockA := m.Lock("a")
	done := make(chan struct{})
	go func() {
		m.Lock("b")()
		close(done)
	}()
	<-done // would deadlock if "b" waited for "a"
	if n := m.Len(); n != 1 {
		t.Fatalf("Len = %d with one key held, want 1", n)
	}
	unlockA()
	if n := m.Len(); n != 0 {
		t.Fatalf("Len = %d after release, want 0", n)
	}
}
