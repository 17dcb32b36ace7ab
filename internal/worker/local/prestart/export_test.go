package prestart

// Peek returns k's ready entries, left in the pool.
func (p *Pool[K, T, E]) Peek(k K) []E {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []E
	for _, it := range p.ready[k] {
		out = append(out, it.e)
	}
	return out
}
