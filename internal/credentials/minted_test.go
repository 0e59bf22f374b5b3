package credentials_test

import (
	"context"
	"testing"

	"github.com/airlock-broker/airlock/internal/credentials"
)

// BenchmarkMintedCredential is what a minted credential costs a call: a
// hit (the session's lease, current) and a miss (a mint by a Minter that
// answers at once, the scrubber built: the issuer's own latency comes on top).
func BenchmarkMintedCredential(b *testing.B) {
	f := mustService(b, &fakeMinter{revoked: map[string]bool{}}, nil)
	ctx := context.Background()
	b.Run("hit", func(b *testing.B) {
		f.credential(b)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := f.svc.Credential(ctx, f.sess, f.up); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("miss", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			credentials.ForgetMinted(f.svc, f.sess.id)
			if _, err := f.svc.Credential(ctx, f.sess, f.up); err != nil {
				b.Fatal(err)
			}
		}
	})
}
