// Package exampleenv is what the runnable programs under examples/ share and
// is no part of jobguard's API: the Redis they talk to (Connect), their main
// with the -trace flag (Main), which prints spans as a tree (SpanTree) or as
// JSON (Tracing), and a buffer their tests write the story and the spans to
// at once (Writer).
package exampleenv
