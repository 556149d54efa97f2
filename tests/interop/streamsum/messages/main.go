// Command interop-messages publishes and reads JSON messages with Gazette's own message package
// (go.gazette.dev/core/message), for tests/interop/test_go_consumers.py: Go publishers feeding a
// gazette-py consumer, and Gazette's read-committed reader reading what that consumer published.
//
// Messages are Word: {"word": ..., "count": ..., "_meta": {"uuid": ...}}. Their UUID sits at
// /_meta/uuid, where gazette-py's JSON framing keeps it by default (Gazette's Go examples keep it
// at /UUID; a gazette-py consumer reads its sources with the default framing).
//
//	interop-messages publish --journal J ... [--outside N] [--plan CRCO] [--per-txn K] [--vocab V]
//
// publishes words to the journals, each word to journal crc32(word) mod len(journals) (zlib's
// CRC-32, as gazette-py's word count partitions them): first --outside messages with
// PublishCommitted (a publisher of their own: Gazette's sequencers treat an OUTSIDE_TXN message
// after a producer's open CONTINUE_TXN span as a rollback), then one transaction per letter of
// --plan, each publishing --per-txn messages to every journal with PublishUncommitted:
//
//	C  commits: BuildAckIntents, and each intent appended to its journal.
//	R  rolls back: the last committed transaction's ACK intents are appended again, as a
//	   Gazette consumer re-writes its recovered checkpoint's intents. Their clock equals the
//	   producer's last ACK, so readers roll the open span back (QueueAckRollback). R needs a C
//	   before it.
//	O  stays open: never acknowledged (only as the last letter).
//
// Every message and ACK goes out through one AppendService, which orders the appends of each
// journal. Once all are written it prints one JSON line per message and ACK, in publish order:
// {"journal", "word", "uuid", "kind" (outside, txn, ack, rollback-ack), "committed"}.
//
//	interop-messages read --journal J --end OFFSET [--uncommitted] [--ring N]
//
// reads J from offset 0 to OFFSET with message.NewReadCommittedIter (a Sequencer whose ring holds
// --ring envelopes: a smaller ring makes committed sequences be read back from the journal, as
// Gazette's readers do) or, with --uncommitted, message.NewReadUncommittedIter, and prints one JSON
// line per message: {"begin", "end", "uuid", "producer", "clock", "flags", "ack", "word", "count"}.
package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"os"

	"github.com/jessevdk/go-flags"
	"go.gazette.dev/core/broker/client"
	pb "go.gazette.dev/core/broker/protocol"
	mbp "go.gazette.dev/core/mainboilerplate"
	"go.gazette.dev/core/message"
)

// Word is a word-count message, its UUID at /_meta/uuid.
type Word struct {
	Word  string `json:"word,omitempty"`
	Count int64  `json:"count,omitempty"`
	Meta  struct {
		UUID message.UUID `json:"uuid"`
	} `json:"_meta"`
}

func (w *Word) GetUUID() message.UUID                         { return w.Meta.UUID }
func (w *Word) SetUUID(uuid message.UUID)                     { w.Meta.UUID = uuid }
func (w *Word) NewAcknowledgement(pb.Journal) message.Message { return new(Word) }

type baseConfig struct {
	Zone   string           `long:"zone" default:"local" description:"Zone of this client"`
	Broker mbp.ClientConfig `group:"Broker" namespace:"broker" env-namespace:"BROKER"`
	Log    mbp.LogConfig    `group:"Logging" namespace:"log" env-namespace:"LOG"`
}

func (c *baseConfig) journalClient(ctx context.Context) pb.RoutedJournalClient {
	mbp.InitLog(c.Log)
	pb.RegisterGRPCDispatcher(c.Zone)
	return c.Broker.MustRoutedJournalClient(ctx)
}

type published struct {
	Journal   pb.Journal `json:"journal"`
	Word      string     `json:"word,omitempty"`
	UUID      string     `json:"uuid"`
	Kind      string     `json:"kind"`
	Committed bool       `json:"committed"`
}

type publishCmd struct {
	baseConfig
	Journals []string `long:"journal" required:"true" description:"Journal to publish to (repeatable)"`
	Outside  int      `long:"outside" default:"0" description:"Messages published with PublishCommitted first"`
	Plan     string   `long:"plan" default:"" description:"One transaction per letter: C commit, R roll back, O leave open"`
	PerTxn   int      `long:"per-txn" default:"3" description:"Messages per journal of each transaction"`
	Vocab    int      `long:"vocab" default:"4" description:"Distinct words per journal"`
	Prefix   string   `long:"prefix" default:"w" description:"Prefix of the words"`
}

func (c *publishCmd) Execute([]string) error {
	var ctx = context.Background()
	var as = client.NewAppendService(ctx, c.journalClient(ctx))
	var n = len(c.Journals)

	// Each journal's vocabulary: the first words that map to it.
	var vocab = make([][]string, n)
	for i, full := 0, 0; full != n; i++ {
		var w = fmt.Sprintf("%s%03d", c.Prefix, i)
		var j = int(crc32.ChecksumIEEE([]byte(w)) % uint32(n))
		if len(vocab[j]) < c.Vocab {
			if vocab[j] = append(vocab[j], w); len(vocab[j]) == c.Vocab {
				full++
			}
		}
	}
	var next = make([]int, n) // Next vocabulary index of each journal.
	var word = func(j int) string {
		var w = vocab[j][next[j]%c.Vocab]
		next[j]++
		return w
	}
	var mapping = func(m message.Mappable) (pb.Journal, string, error) {
		var j = crc32.ChecksumIEEE([]byte(m.(*Word).Word)) % uint32(n)
		return pb.Journal(c.Journals[j]), "application/x-ndjson", nil
	}

	var out []published
	var publish = func(pub *message.Publisher, j int, kind string, committed bool) error {
		var msg = &Word{Word: word(j)}
		var err error
		if kind == "outside" {
			_, err = pub.PublishCommitted(mapping, msg)
		} else {
			_, err = pub.PublishUncommitted(mapping, msg)
		}
		out = append(out, published{pb.Journal(c.Journals[j]), msg.Word, msg.Meta.UUID.String(), kind, committed})
		return err
	}
	var appendAck = func(journal pb.Journal, intent []byte, kind string, committed bool) {
		var aa = as.StartAppend(pb.AppendRequest{Journal: journal}, nil)
		_, _ = aa.Writer().Write(intent)
		mbp.Must(aa.Release(), "appending ACK intent")
		var ack Word
		mbp.Must(json.Unmarshal(intent, &ack), "decoding ACK intent")
		out = append(out, published{journal, "", ack.Meta.UUID.String(), kind, committed})
	}

	var outside = message.NewPublisher(as, nil)
	for i := 0; i != c.Outside; i++ {
		mbp.Must(publish(outside, i%n, "outside", true), "publishing committed message")
	}

	var txns = message.NewPublisher(as, nil)
	var lastAcks = map[pb.Journal][]byte{} // Intents of the last committed transaction.
	for t, letter := range c.Plan {
		var committed = letter == 'C'
		if letter != 'C' && letter != 'R' && letter != 'O' {
			return fmt.Errorf("--plan letter %q is not C, R or O", letter)
		} else if letter == 'O' && t != len(c.Plan)-1 {
			return fmt.Errorf("--plan: O (left open) must be the last transaction")
		}
		for k := 0; k != c.PerTxn; k++ {
			for j := 0; j != n; j++ {
				mbp.Must(publish(txns, j, "txn", committed), "publishing uncommitted message")
			}
		}
		switch letter {
		case 'C':
			var intents, err = txns.BuildAckIntents()
			mbp.Must(err, "building ACK intents")
			for _, intent := range intents {
				lastAcks[intent.Journal] = append([]byte(nil), intent.Intent...)
				appendAck(intent.Journal, intent.Intent, "ack", true)
			}
		case 'R':
			if len(lastAcks) == 0 {
				return fmt.Errorf("--plan: R (roll back) needs a committed transaction (C) before it")
			}
			// Forget the intents of the rolled-back transaction, then re-append the last committed ones.
			var _, err = txns.BuildAckIntents()
			mbp.Must(err, "building ACK intents")
			for _, j := range c.Journals {
				appendAck(pb.Journal(j), lastAcks[pb.Journal(j)], "rollback-ack", false)
			}
		}
	}

	for op := range as.PendingExcept("") {
		if err := op.Err(); err != nil {
			return fmt.Errorf("append failed: %w", err)
		}
	}
	var enc = json.NewEncoder(os.Stdout)
	for _, p := range out {
		mbp.Must(enc.Encode(p), "writing output")
	}
	return nil
}

type read struct {
	Begin    int64  `json:"begin"`
	End      int64  `json:"end"`
	UUID     string `json:"uuid"`
	Producer string `json:"producer"`
	Clock    uint64 `json:"clock"`
	Flags    uint16 `json:"flags"`
	Ack      bool   `json:"ack"`
	Word     string `json:"word,omitempty"`
	Count    int64  `json:"count,omitempty"`
}

type readCmd struct {
	baseConfig
	Journal     string `long:"journal" required:"true" description:"Journal to read"`
	End         int64  `long:"end" required:"true" description:"Read up to this offset (e.g. the journal's write head)"`
	Uncommitted bool   `long:"uncommitted" description:"Read uncommitted messages (no Sequencer)"`
	Ring        int    `long:"ring" default:"1024" description:"Envelopes the Sequencer's ring holds"`
}

func (c *readCmd) Execute([]string) error {
	var ctx = context.Background()
	var rjc = c.journalClient(ctx)
	var rr = client.NewRetryReader(ctx, rjc, pb.ReadRequest{
		Journal:   pb.Journal(c.Journal),
		Offset:    0,
		EndOffset: c.End,
		Block:     true,
	})
	var newMsg = func(*pb.JournalSpec) (message.Message, error) { return new(Word), nil }

	var it message.Iterator
	if c.Uncommitted {
		it = message.NewReadUncommittedIter(rr, newMsg)
	} else {
		it = message.NewReadCommittedIter(rr, newMsg, message.NewSequencer(nil, nil, c.Ring))
	}
	var enc = json.NewEncoder(os.Stdout)
	for {
		var env, err = it.Next()
		if err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		var w = env.Message.(*Word)
		var uuid = w.GetUUID()
		var producer = message.GetProducerID(uuid)
		mbp.Must(enc.Encode(read{
			Begin:    env.Begin,
			End:      env.End,
			UUID:     uuid.String(),
			Producer: hex.EncodeToString(producer[:]),
			Clock:    uint64(message.GetClock(uuid)),
			Flags:    uint16(message.GetFlags(uuid)),
			Ack:      message.GetFlags(uuid) == message.Flag_ACK_TXN,
			Word:     w.Word,
			Count:    w.Count,
		}), "writing output")
	}
}

func main() {
	var parser = flags.NewParser(nil, flags.Default)
	_, _ = parser.AddCommand("publish", "Publish words", "Publish committed, rolled-back and open "+
		"transactions of words (see the package comment).", new(publishCmd))
	_, _ = parser.AddCommand("read", "Read messages", "Read a journal's messages, committed "+
		"(Gazette's ReadCommittedIter) or uncommitted, as JSON lines.", new(readCmd))
	mbp.MustParseArgs(parser)
}
