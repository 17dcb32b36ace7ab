package remote

// Reveal is the token's secret, for tests that send it by hand.
func (t Token) Reveal() string { return string(t.secret) }
