import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * KIP-932 share groups through Kafka's own Java client (KafkaShareConsumer, Admin), run the same
 * way against the reference Kafka and raftlog (tests/conformance/test_java_share.py). One
 * subcommand, "share", prints one JSON line of what it saw; every value in it is deterministic.
 *
 * A new share group starts at the log end (share.auto.offset.reset=latest, Kafka's default):
 * marker records are produced until the consumers have received one from every partition, so
 * every share partition is initialised before the scenario's records are produced.
 */
public class ShareClient {
    static final int PARTITIONS = 3, RECORDS = 30;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[1], topic = args[2], group = args[3];
        System.out.println(share(bootstrap, topic, group));
    }

    static Properties consumerProps(String bootstrap, String group) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("share.acknowledgement.mode", "explicit");
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        return p;
    }

    static String share(String bootstrap, String topic, String group) throws Exception {
        Properties ap = new Properties();
        ap.put("bootstrap.servers", bootstrap);
        Map<String, Object> out = new TreeMap<>();
        try (Admin admin = Admin.create(ap)) {
            admin.createTopics(List.of(new NewTopic(topic, PARTITIONS, (short) 1))).all().get(60, TimeUnit.SECONDS);
            Properties pp = new Properties();
            pp.put("bootstrap.servers", bootstrap);
            pp.put("key.serializer", StringSerializer.class.getName());
            pp.put("value.serializer", StringSerializer.class.getName());
            pp.put("acks", "all");
            // What the consumers saw: value -> delivery counts, and the values each consumer accepted.
            Map<String, List<Integer>> deliveries = new ConcurrentHashMap<>();
            Set<String> accepted = ConcurrentHashMap.newKeySet();
            Set<Integer> warmed = ConcurrentHashMap.newKeySet();
            List<String> duplicates = Collections.synchronizedList(new ArrayList<>());
            AtomicBoolean stop = new AtomicBoolean();
            List<Integer> perConsumer = Collections.synchronizedList(new ArrayList<>(List.of(0, 0)));
            ExecutorService pool = Executors.newFixedThreadPool(2);
            List<Future<?>> running = new ArrayList<>();
            for (int c = 0; c < 2; c++) {
                final int me = c;
                running.add(pool.submit(() -> {
                    try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(consumerProps(bootstrap, group))) {
                        consumer.subscribe(List.of(topic));
                        while (!stop.get()) {
                            for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                                String v = r.value();
                                if (v.startsWith("warm")) {
                                    warmed.add(r.partition());
                                    consumer.acknowledge(r, AcknowledgeType.ACCEPT);
                                    continue;
                                }
                                deliveries.computeIfAbsent(v, k -> Collections.synchronizedList(new ArrayList<>()))
                                        .add(r.deliveryCount().orElse((short) -1).intValue());
                                if (v.equals("v-13")) {
                                    consumer.acknowledge(r, AcknowledgeType.REJECT);
                                } else if (v.equals("v-7")) {  // a poison record: released until the limit
                                    consumer.acknowledge(r, AcknowledgeType.RELEASE);
                                } else if (v.equals("v-21") && r.deliveryCount().orElse((short) 0) == 1) {
                                    consumer.acknowledge(r, AcknowledgeType.RELEASE);  // redelivered once
                                } else {
                                    consumer.acknowledge(r, AcknowledgeType.ACCEPT);
                                    if (!accepted.add(v)) duplicates.add(v);
                                    synchronized (perConsumer) { perConsumer.set(me, perConsumer.get(me) + 1); }
                                }
                            }
                            consumer.commitSync(Duration.ofSeconds(30));
                        }
                    }
                    return null;
                }));
            }
            long deadline = System.currentTimeMillis() + 120_000;
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
                int w = 0;
                while (warmed.size() < PARTITIONS) {
                    if (System.currentTimeMillis() > deadline) throw new IllegalStateException("no warm-up record read: " + warmed);
                    for (int p = 0; p < PARTITIONS; p++) producer.send(new ProducerRecord<>(topic, p, "w", "warm-" + (w++))).get();
                    Thread.sleep(500);  // the consumers poll meanwhile (a pace, not a synchronisation)
                }
                for (int i = 0; i < RECORDS; i++) producer.send(new ProducerRecord<>(topic, i % PARTITIONS, "k", "v-" + i)).get();
            }
            // Done when every record but v-7 and v-13 was accepted and v-7 reached its delivery limit.
            while (!(accepted.size() == RECORDS - 2 && deliveries.getOrDefault("v-7", List.of()).size() >= 5)) {
                if (System.currentTimeMillis() > deadline) break;
                Thread.sleep(100);
            }
            Thread.sleep(1000);  // a late redelivery of v-7 or v-13 would show here
            stop.set(true);
            for (Future<?> f : running) f.get(60, TimeUnit.SECONDS);
            pool.shutdown();
            out.put("accepted", new TreeSet<>(accepted).size());
            out.put("duplicates", duplicates);
            out.put("v7_deliveries", deliveries.get("v-7"));
            out.put("v13_deliveries", deliveries.get("v-13"));
            out.put("v21_deliveries", deliveries.get("v-21"));
            out.put("v0_deliveries", deliveries.get("v-0"));

            ShareGroupDescription d = admin.describeShareGroups(List.of(group)).describedGroups().get(group).get(30, TimeUnit.SECONDS);
            out.put("described_state_after_close", d.groupState().toString());
            out.put("described_members_after_close", d.members().size());
            Map<TopicPartition, SharePartitionOffsetInfo> offsets = admin.listShareGroupOffsets(
                    Map.of(group, new ListShareGroupOffsetsSpec())).partitionsToOffsetInfo(group).get(30, TimeUnit.SECONDS);
            Map<String, Object> lag = new TreeMap<>();
            for (Map.Entry<TopicPartition, SharePartitionOffsetInfo> e : offsets.entrySet())
                if (e.getKey().topic().equals(topic)) lag.put(String.valueOf(e.getKey().partition()), e.getValue().lag().orElse(-1L));
            out.put("lag", lag);

            // Reset to the beginning (the group is empty): a new consumer gets every record again.
            Map<TopicPartition, Long> zero = new HashMap<>();
            for (int p = 0; p < PARTITIONS; p++) zero.put(new TopicPartition(topic, p), 0L);
            admin.alterShareGroupOffsets(group, zero).all().get(30, TimeUnit.SECONDS);
            int again = 0;
            try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(consumerProps(bootstrap, group))) {
                consumer.subscribe(List.of(topic));
                long until = System.currentTimeMillis() + 60_000;
                while (again < RECORDS && System.currentTimeMillis() < until) {
                    for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                        consumer.acknowledge(r, AcknowledgeType.ACCEPT);
                        if (r.value().startsWith("v-")) again++;
                    }
                    consumer.commitSync(Duration.ofSeconds(30));
                }
            }
            out.put("after_reset", again);
            admin.deleteShareGroupOffsets(group, Set.of(topic)).all().get(30, TimeUnit.SECONDS);
            Map<TopicPartition, SharePartitionOffsetInfo> left = admin.listShareGroupOffsets(
                    Map.of(group, new ListShareGroupOffsetsSpec())).partitionsToOffsetInfo(group).get(30, TimeUnit.SECONDS);
            out.put("offsets_after_delete", left.keySet().stream().filter(tp -> tp.topic().equals(topic)).count());
        }
        return toJson(out);
    }

    static String toJson(Object o) {
        if (o == null) return "null";
        if (o instanceof String s) return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
        if (o instanceof Number || o instanceof Boolean) return o.toString();
        if (o instanceof Map<?, ?> m) {
            StringJoiner j = new StringJoiner(",", "{", "}");
            for (Map.Entry<?, ?> e : m.entrySet()) j.add(toJson(String.valueOf(e.getKey())) + ":" + toJson(e.getValue()));
            return j.toString();
        }
        if (o instanceof Collection<?> c) {
            StringJoiner j = new StringJoiner(",", "[", "]");
            for (Object x : c) j.add(toJson(x));
            return j.toString();
        }
        return toJson(o.toString());
    }
}
