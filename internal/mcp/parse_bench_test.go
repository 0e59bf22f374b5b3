package mcp

import "testing"

// A tools/call as a sandbox sends it (the stateless era's _meta), and a
// tool's answer as a server sends it: the two messages the MCP door
// parses on every call.
var (
	benchCall   = []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}},"name":"create_issue","arguments":{"repo":"acme/web","title":"crash on start","labels":["bug","triage"],"amount":3}}}`)
	benchAnswer = []byte(`{"jsonrpc":"2.0","id":12,"result":{"content":[{"type":"text","text":"created in acme/web: crash on start"}],"structuredContent":{"id":4711,"url":"https://example.test/acme/web/issues/4711","labels":["bug","triage"]},"isError":false}}`)
)

func BenchmarkParse(b *testing.B) {
	for _, tc := range []struct {
		name string
		msg  []byte
	}{{"call", benchCall}, {"answer", benchAnswer}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Parse(tc.msg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEncode: what the door writes of every call: the forwarded
// tools/call, the arguments' digest, and the answer for the sandbox.
func BenchmarkEncode(b *testing.B) {
	call, err := Parse(benchCall)
	if err != nil {
		b.Fatal(err)
	}
	name, args, err := call.ToolCall()
	if err != nil {
		b.Fatal(err)
	}
	answer, err := Parse(benchAnswer)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("request", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := EncodeRequest(IntID(12), "tools/call", ToolCallParams(name, args), nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("args_sha256", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ArgsSHA256(args); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("result", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := EncodeResult(call.ID, answer.Result); err != nil {
				b.Fatal(err)
			}
		}
	})
}
