package dev.gazettepy.bench;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.ThreadMetadata;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * The Kafka Streams peer of our word count (bench/kstreams_peer.py): one instance of a Kafka Streams
 * application that counts the words of a topic of JSON messages ({"word": w, ...}) and writes every
 * updated count to an output topic (key: the word, value: the count as a big-endian long), with
 * exactly-once v2 unless told otherwise.
 *
 * <p>Usage: {@code WordCount INPUT OUTPUT [key=value ...]}: each key=value is a Kafka Streams (or
 * client) config, except these two of the bench's own:
 *
 * <ul>
 *   <li>{@code bench.topology}: {@code group-by} (default: each message's JSON parsed for its word,
 *       then grouped by it, which repartitions through an internal topic: the DSL's word count) or
 *       {@code by-key} (grouped by the record key, the word as the producer keyed it: no parse, no
 *       repartition).
 *   <li>{@code bench.pause.after.records=N}: after its N-th count update (the N-th record it writes to
 *       the output topic) this instance's stream thread prints "paused N" and blocks, mid-transaction,
 *       until the bench kills the process (so that a SIGKILL lands at a known point of the run, not by
 *       timing). Updates, not input records: the counting tasks are the stateful ones, which Kafka
 *       Streams spreads evenly over the instances, so each instance has its share of them.
 * </ul>
 *
 * <p>It reports to standard output, one event a line, for the bench to follow: {@code state NEW OLD
 * tasks=N} on each state change (N: its active tasks), {@code first-record MILLIS} (wall clock) when it
 * takes its first input record, {@code paused N}, and {@code error TEXT} on an uncaught exception
 * (then it exits with status 1). SIGTERM closes it cleanly.
 */
public final class WordCount {
  static final String TOPOLOGY = "bench.topology";
  static final String PAUSE_AFTER = "bench.pause.after.records";
  static final Duration CLOSE_TIMEOUT = Duration.ofSeconds(20);

  private static final ObjectMapper JSON = new ObjectMapper();

  /** Input records taken and count updates written by this instance's stream thread (one thread). */
  private long taken;

  private long updates;

  private final long pauseAfter;

  private WordCount(long pauseAfter) {
    this.pauseAfter = pauseAfter;
  }

  static synchronized void event(String line) {
    System.out.println(line);
    System.out.flush();
  }

  /** Stamps the first input record (the bench times the run from the earliest of these). */
  private void took() {
    if (++taken == 1) {
      event("first-record " + System.currentTimeMillis());
    }
  }

  /** Blocks the stream thread for good at the pause point, before it writes that update. */
  private void updated() {
    if (++updates == pauseAfter) {
      event("paused " + updates);
      while (true) { // until SIGKILL: never returns, never commits the transaction it is in
        try {
          Thread.sleep(60_000);
        } catch (InterruptedException e) {
          // closing: still never return, the bench kills this process
        }
      }
    }
  }

  static String word(byte[] message) {
    try {
      JsonNode node = JSON.readTree(message);
      JsonNode word = node == null ? null : node.get("word");
      if (word == null || !word.isTextual()) {
        throw new IllegalArgumentException("a message without a \"word\" string: " + new String(message));
      }
      return word.textValue();
    } catch (IOException e) {
      throw new IllegalArgumentException("a message that is not JSON: " + new String(message), e);
    }
  }

  private void build(StreamsBuilder builder, String input, String output, String topology) {
    KGroupedStream<String, ?> grouped;
    switch (topology) {
      case "group-by":
        KStream<byte[], byte[]> raw = builder.stream(input, Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()));
        grouped =
            raw.mapValues(
                    v -> {
                      took();
                      return word(v);
                    })
                .groupBy((k, w) -> w, Grouped.with("words-by-word", Serdes.String(), Serdes.String()));
        break;
      case "by-key":
        KStream<String, byte[]> keyed = builder.stream(input, Consumed.with(Serdes.String(), Serdes.ByteArray()));
        grouped = keyed.peek((k, v) -> took()).groupByKey(Grouped.with(Serdes.String(), Serdes.ByteArray()));
        break;
      default:
        throw new IllegalArgumentException(TOPOLOGY + "=" + topology + ": expected group-by or by-key");
    }
    grouped
        .count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("counts")
            .withKeySerde(Serdes.String())
            .withValueSerde(Serdes.Long()))
        .toStream()
        .peek((word, count) -> updated())
        .to(output, Produced.with(Serdes.String(), Serdes.Long()));
  }

  static int activeTasks(KafkaStreams streams) {
    int n = 0;
    for (ThreadMetadata thread : streams.metadataForLocalThreads()) {
      n += thread.activeTasks().size();
    }
    return n;
  }

  public static void main(String[] args) throws InterruptedException {
    if (args.length < 2) {
      System.err.println("usage: WordCount INPUT OUTPUT [key=value ...]");
      System.exit(2);
    }
    Properties props = new Properties();
    props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
    for (int i = 2; i < args.length; i++) {
      int eq = args[i].indexOf('=');
      if (eq <= 0) {
        System.err.println("argument " + (i + 1) + " (" + args[i] + "): expected key=value");
        System.exit(2);
      }
      props.put(args[i].substring(0, eq), args[i].substring(eq + 1));
    }
    String topology = (String) props.remove(TOPOLOGY);
    String pause = (String) props.remove(PAUSE_AFTER);
    WordCount app = new WordCount(pause == null ? 0 : Long.parseLong(pause));
    StreamsBuilder builder = new StreamsBuilder();
    app.build(builder, args[0], args[1], topology == null ? "group-by" : topology);

    KafkaStreams streams = new KafkaStreams(builder.build(props), props);
    CountDownLatch stopped = new CountDownLatch(1);
    int[] status = {0};
    streams.setStateListener(
        (now, before) -> {
          event("state " + now + " " + before + " tasks=" + (now == KafkaStreams.State.RUNNING ? activeTasks(streams) : 0));
          if (now == KafkaStreams.State.ERROR) {
            status[0] = 1;
          }
          if (now == KafkaStreams.State.NOT_RUNNING || now == KafkaStreams.State.ERROR) {
            stopped.countDown();
          }
        });
    streams.setUncaughtExceptionHandler(
        e -> {
          event("error " + e);
          status[0] = 1;
          return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
    Runtime.getRuntime().addShutdownHook(new Thread(() -> streams.close(CLOSE_TIMEOUT)));
    streams.start();
    stopped.await();
    streams.close(CLOSE_TIMEOUT);
    System.exit(status[0]);
  }
}
