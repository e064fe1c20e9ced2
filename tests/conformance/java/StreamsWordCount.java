// Kafka Streams' word count end to end (issue 40), the conformance suite's Streams scenario: create
// the input topic, produce fixed sentences, run the topology (stream -> flatMapValues -> groupBy
// -> count -> counts topic) with the processing guarantee given, read the counts topic back until
// every word has its final count (or the deadline), and print what a user sees as one JSON
// object: the counts, the application's state, and the exception that stopped it, if any.
// Compiled by tests/reference/kafka_ref.py (javac, cached by content hash); never by the product.
//
//     StreamsWordCount <bootstrap> <name> <at_least_once|exactly_once_v2> <deadline_s>
import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.LongDeserializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

public class StreamsWordCount {
    static final String[] WORDS = {"raft", "log", "kafka", "stream", "count", "word", "leader", "replica"};
    static final int SENTENCES = 200;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], name = args[1], guarantee = args[2];
        long deadline = System.currentTimeMillis() + 1000L * Long.parseLong(args[3]);
        String input = name + "-input", output = name + "-counts";
        Map<String, Object> out = new TreeMap<>();
        out.put("guarantee", guarantee);

        Properties common = new Properties();
        common.put("bootstrap.servers", bootstrap);
        common.put("request.timeout.ms", "15000");
        try (Admin admin = Admin.create(common)) {
            admin.createTopics(List.of(new NewTopic(input, 3, (short) 3), new NewTopic(output, 3, (short) 3)))
                 .all().get();
        }
        // The sentences and the counts they must give: word i%8 and (i*3)%8, i/50+1 times each.
        Map<String, Long> expected = new TreeMap<>();
        Properties pp = (Properties) common.clone();
        pp.put("acks", "all");
        try (KafkaProducer<String, String> p = new KafkaProducer<>(pp, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < SENTENCES; i++) {
                StringBuilder s = new StringBuilder();
                for (int r = 0; r <= i / 50; r++)
                    s.append(WORDS[i % WORDS.length]).append(' ').append(WORDS[(i * 3) % WORDS.length].toUpperCase()).append(". ");
                for (String w : s.toString().toLowerCase().split("\\W+"))
                    if (!w.isEmpty()) expected.merge(w, 1L, Long::sum);
                p.send(new ProducerRecord<>(input, "s" + i, s.toString()));
            }
            p.flush();
        }
        out.put("expected_words", expected.size());

        Path stateDir = Files.createTempDirectory("streams-wordcount-");
        Properties sp = (Properties) common.clone();
        sp.put(StreamsConfig.APPLICATION_ID_CONFIG, name + "-app");
        sp.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        sp.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.toString());
        sp.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, "3");
        sp.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, "200");
        sp.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, "0");
        sp.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        sp.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        sp.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
               .flatMapValues(v -> Arrays.asList(v.toLowerCase().split("\\W+")))
               .filter((k, w) -> !w.isEmpty())
               .groupBy((k, w) -> w, Grouped.with(Serdes.String(), Serdes.String()))
               .count(Materialized.as("word-counts"))
               .toStream()
               .to(output, Produced.with(Serdes.String(), Serdes.Long()));

        AtomicReference<Throwable> failure = new AtomicReference<>();
        KafkaStreams streams = new KafkaStreams(builder.build(), sp);
        streams.setUncaughtExceptionHandler(e -> {
            failure.compareAndSet(null, e);
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        Map<String, Long> counts = new TreeMap<>();
        long read = 0;
        try {
            streams.start();
            Properties cp = (Properties) common.clone();
            cp.put("group.id", name + "-reader");
            cp.put("auto.offset.reset", "earliest");
            cp.put("isolation.level", "read_committed");
            try (KafkaConsumer<String, Long> c = new KafkaConsumer<>(cp, new StringDeserializer(), new LongDeserializer())) {
                c.subscribe(List.of(output));
                while (System.currentTimeMillis() < deadline && !counts.equals(expected) && failure.get() == null
                       && streams.state() != KafkaStreams.State.ERROR && streams.state() != KafkaStreams.State.NOT_RUNNING) {
                    for (ConsumerRecord<String, Long> r : c.poll(Duration.ofMillis(500))) {
                        counts.put(r.key(), r.value());
                        read++;
                    }
                }
            }
            out.put("state", streams.state().toString());
        } finally {
            streams.close(Duration.ofSeconds(30));
            streams.cleanUp();
        }
        out.put("counts", counts);
        out.put("complete", counts.equals(expected));
        // at_least_once may repeat an update after a retry; exactly_once_v2 never does.
        out.put("updates_at_least_words", read >= expected.values().stream().mapToLong(Long::longValue).sum());
        Throwable t = failure.get();
        while (t != null && t.getCause() != null && t.getClass().getName().startsWith("org.apache.kafka.streams.errors"))
            t = t.getCause();
        out.put("error", t == null ? null : t.getClass().getSimpleName() + ": " + t.getMessage());
        System.out.println(new ObjectMapper().writeValueAsString(out));
        System.out.flush();
        System.exit(0);
    }
}
