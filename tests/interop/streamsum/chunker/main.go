// Command stream-sum-chunker runs the chunker of Gazette's stream-sum example
// (go.gazette.dev/core/examples/stream-sum) against a broker cluster: its workers publish chunks
// of pseudo-random streams to the journals labeled with message-type stream_sum.Chunk and, as each
// stream completes, wait for the summer consumer's final sum in examples/stream-sum/sums and
// compare it with the sum they computed themselves. A lost, repeated or misordered chunk, a wrong
// or missing sum makes it exit non-zero (Gazette's log.Fatal); exit status 0 means every stream of
// every worker was verified.
//
// This is Gazette's own generator and verifier (stream_sum.GenerateAndVerifyStreams). Gazette's
// chunker command also serves diagnostics on a fixed :8080 and exits when that port is taken;
// this command leaves that out (--debug.port serves them when wanted), so it runs beside anything.
package main

import (
	"context"

	"github.com/jessevdk/go-flags"
	log "github.com/sirupsen/logrus"
	pb "go.gazette.dev/core/broker/protocol"
	stream_sum "go.gazette.dev/core/examples/stream-sum"
	mbp "go.gazette.dev/core/mainboilerplate"
)

type runCmd struct {
	cfg *stream_sum.ChunkerConfig
}

func (c runCmd) Execute([]string) error {
	defer mbp.InitDiagnosticsAndRecover(c.cfg.Diagnostics)()
	mbp.InitLog(c.cfg.Log)
	pb.RegisterGRPCDispatcher(c.cfg.Chunker.Zone)

	log.WithField("config", c.cfg).Info("starting stream-sum chunker")
	if err := stream_sum.GenerateAndVerifyStreams(context.Background(), c.cfg); err != nil {
		return err
	}
	log.WithFields(log.Fields{
		"workers": c.cfg.Chunker.Workers,
		"streams": c.cfg.Chunker.Streams,
		"chunks":  c.cfg.Chunker.Chunks,
	}).Info("every stream verified")
	return nil
}

func main() {
	var cfg = new(stream_sum.ChunkerConfig)
	var parser = flags.NewParser(cfg, flags.Default)
	_, _ = parser.AddCommand("run", "Publish and verify streams",
		"Publish --chunker.streams streams of --chunker.chunks chunks from each of --chunker.workers "+
			"workers, verifying each stream's final sum; exit 0 once all are verified.", &runCmd{cfg: cfg})
	mbp.MustParseArgs(parser)
}
