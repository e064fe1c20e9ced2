// The Java client side of the conformance suite (issue 40): each subcommand runs one scenario
// with Apache Kafka's own client against the bootstrap it is given and prints what a user sees
// as one JSON object on stdout (the `group-member` subcommand prints one line per event).
// Compiled by tests/reference/kafka_ref.py (javac, cached by content hash); never by the product.
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class ConformanceClient {
    static final ObjectMapper JSON = new ObjectMapper();

    public static void main(String[] args) throws Exception {
        String cmd = args[0], bootstrap = args[1];
        Object out;
        switch (cmd) {
            case "produce": out = produce(bootstrap, args[2], args[3], args[4], Integer.parseInt(args[5])); break;
            case "seek": out = seek(bootstrap, args[2]); break;
            case "admin": out = admin(bootstrap, args[2]); break;
            case "group-member": groupMember(bootstrap, args[2], args[3], args[4]); return;
            case "transactions": out = Transactions.run(bootstrap, args[2]); break;
            default: throw new IllegalArgumentException("unknown subcommand " + cmd);
        }
        System.out.println(JSON.writeValueAsString(out));
        System.out.flush();
        System.exit(0);
    }

    static Properties props(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("request.timeout.ms", "15000");
        p.put("default.api.timeout.ms", "30000");
        return p;
    }

    static Admin newAdmin(String bootstrap) { return Admin.create(props(bootstrap)); }

    static String errorName(Throwable t) {
        while ((t instanceof ExecutionException || t instanceof KafkaException && !(t instanceof org.apache.kafka.common.errors.ApiException)) && t.getCause() != null)
            t = t.getCause();
        return t.getClass().getSimpleName();
    }

    static KafkaProducer<String, String> producer(String bootstrap, String acks, String compression) {
        Properties p = props(bootstrap);
        p.put("acks", acks);
        p.put("enable.idempotence", acks.equals("all") ? "true" : "false");
        p.put("compression.type", compression);
        p.put("linger.ms", "5");
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        return new KafkaProducer<>(p);
    }

    static KafkaConsumer<String, String> consumer(String bootstrap, Map<String, String> extra) {
        Properties p = props(bootstrap);
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        p.put("auto.offset.reset", "earliest");
        p.put("enable.auto.commit", "false");
        p.putAll(extra);
        return new KafkaConsumer<>(p);
    }

    static Map<String, Object> row(ConsumerRecord<String, String> r) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("partition", r.partition());
        m.put("offset", r.offset());
        m.put("key", r.key());
        m.put("value", r.value());
        List<String> hs = new ArrayList<>();
        for (Header h : r.headers()) hs.add(h.key() + "=" + new String(h.value(), StandardCharsets.UTF_8));
        m.put("headers", hs);
        return m;
    }

    /** Read `topic`'s partitions from the beginning (assign + seekToBeginning) until `expected`
     * records came, or 60 s. Not up to the end offsets: after acks 0/1 the high watermark may
     * still lag (on Kafka too) when the producer is done. */
    static List<Map<String, Object>> readAll(String bootstrap, String topic, int expected) {
        List<Map<String, Object>> rows = new ArrayList<>();
        try (KafkaConsumer<String, String> c = consumer(bootstrap, Map.of())) {
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo pi : c.partitionsFor(topic)) tps.add(new TopicPartition(topic, pi.partition()));
            c.assign(tps);
            c.seekToBeginning(tps);
            long deadline = System.currentTimeMillis() + 60_000;
            while (rows.size() < expected && System.currentTimeMillis() < deadline)
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) rows.add(row(r));
        }
        rows.sort(Comparator.comparing((Map<String, Object> m) -> (Integer) m.get("partition"))
                .thenComparing(m -> (Long) m.get("offset")));
        return rows;
    }

    /** Create `topic` (RF 3) unless it exists. */
    static void ensureTopic(String bootstrap, String topic, int partitions) throws Exception {
        try (Admin a = newAdmin(bootstrap)) {
            a.createTopics(List.of(new NewTopic(topic, partitions, (short) 3))).all().get();
        } catch (ExecutionException e) {
            if (!(e.getCause() instanceof org.apache.kafka.common.errors.TopicExistsException)) throw e;
        }
    }

    static Object produce(String bootstrap, String topic, String acks, String compression, int n) throws Exception {
        ensureTopic(bootstrap, topic, 6);
        Map<String, Object> out = new LinkedHashMap<>();
        List<Object> sent = new ArrayList<>();
        try (KafkaProducer<String, String> p = producer(bootstrap, acks, compression)) {
            List<java.util.concurrent.Future<RecordMetadata>> fs = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                ProducerRecord<String, String> r = new ProducerRecord<>(topic, null, "k" + (i % 7),
                        "value-" + i + "-" + "x".repeat(i % 50),
                        List.of(new RecordHeader("i", Integer.toString(i).getBytes(StandardCharsets.UTF_8))));
                fs.add(p.send(r));
            }
            p.flush();
            for (java.util.concurrent.Future<RecordMetadata> f : fs) {
                try {
                    RecordMetadata md = f.get(60, TimeUnit.SECONDS);
                    sent.add(List.of(md.partition(), md.hasOffset() ? md.offset() : -1));
                } catch (ExecutionException e) {
                    sent.add(errorName(e));
                }
            }
        }
        out.put("sent", sent);
        out.put("read", readAll(bootstrap, topic, n));
        return out;
    }

    static Object seek(String bootstrap, String topic) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        long base = 1_600_000_000_000L;
        ensureTopic(bootstrap, topic, 1);
        try (KafkaProducer<String, String> p = producer(bootstrap, "all", "none")) {
            for (int i = 0; i < 20; i++)
                p.send(new ProducerRecord<>(topic, 0, base + i * 1000L, "k" + i, "v" + i)).get(30, TimeUnit.SECONDS);
        }
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaConsumer<String, String> c = consumer(bootstrap, Map.of())) {
            c.assign(List.of(tp));
            out.put("beginning", c.beginningOffsets(List.of(tp)).get(tp));
            out.put("end", c.endOffsets(List.of(tp)).get(tp));
            c.seek(tp, 5);
            List<Object> got = new ArrayList<>();
            long deadline = System.currentTimeMillis() + 30_000;
            while (got.size() < 3 && System.currentTimeMillis() < deadline)
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500)))
                    if (got.size() < 3) got.add(List.of(r.offset(), r.key(), r.timestamp() - base, r.timestampType().name));
            out.put("after_seek_5", got);
            c.seekToEnd(List.of(tp));
            out.put("position_end", c.position(tp));
            c.seekToBeginning(List.of(tp));
            out.put("position_beginning", c.position(tp));
            Map<String, Object> times = new LinkedHashMap<>();
            for (long t : new long[]{0, 2500, 3000, 19000, 19001, base + 10_000_000}) {
                long q = t > base ? t : base + t;
                OffsetAndTimestamp ot = c.offsetsForTimes(Map.of(tp, q)).get(tp);
                times.put(Long.toString(t), ot == null ? null : List.of(ot.offset(), ot.timestamp() - base));
            }
            out.put("offsets_for_times", times);
            c.seek(tp, 100);  // past the end: auto.offset.reset=earliest brings it back
            deadline = System.currentTimeMillis() + 30_000;
            Object first = null;
            while (first == null && System.currentTimeMillis() < deadline)
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) { first = r.offset(); break; }
            out.put("reset_from_past_end", first);
        }
        return out;
    }

    /** One member of a classic group with the cooperative-sticky assignor: prints its assignment
     * on every change and each record it reads; commits synchronously after every poll; closes
     * (committing, leaving the group) when stdin ends. */
    static void groupMember(String bootstrap, String topic, String group, String name) throws Exception {
        Map<String, String> extra = new HashMap<>();
        extra.put("group.id", group);
        extra.put("group.protocol", "classic");
        extra.put("partition.assignment.strategy", CooperativeStickyAssignor.class.getName());
        extra.put("session.timeout.ms", "6000");
        extra.put("heartbeat.interval.ms", "500");
        extra.put("client.id", name);
        KafkaConsumer<String, String> c = consumer(bootstrap, extra);
        Thread stdin = new Thread(() -> {
            try { new BufferedReader(new InputStreamReader(System.in)).readLine(); } catch (Exception ignored) { }
            c.wakeup();
        });
        stdin.setDaemon(true);
        stdin.start();
        Set<TopicPartition> last = new HashSet<>();
        try {
            c.subscribe(List.of(topic));
            while (true) {
                ConsumerRecords<String, String> rs = c.poll(Duration.ofMillis(200));
                for (ConsumerRecord<String, String> r : rs)
                    emit(Map.of("event", "record", "partition", r.partition(), "offset", r.offset(), "value", r.value()));
                if (!rs.isEmpty()) c.commitSync();
                Set<TopicPartition> now = new HashSet<>(c.assignment());
                if (!now.equals(last)) {
                    List<Integer> ps = new ArrayList<>();
                    for (TopicPartition tp : now) ps.add(tp.partition());
                    Collections.sort(ps);
                    emit(Map.of("event", "assignment", "partitions", ps));
                    last = now;
                }
            }
        } catch (org.apache.kafka.common.errors.WakeupException e) {
            c.close(CloseOptions.timeout(Duration.ofSeconds(20)));
            emit(Map.of("event", "closed"));
        }
    }

    static synchronized void emit(Object o) throws Exception {
        System.out.println(JSON.writeValueAsString(o));
        System.out.flush();
    }

    interface Step { Object run() throws Exception; }

    static void step(Map<String, Object> out, String name, Step s) {
        try {
            out.put(name, Map.of("ok", s.run()));
        } catch (Exception e) {
            out.put(name, Map.of("error", errorName(e)));
        }
    }

    static Object admin(String bootstrap, String topic) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        String group = topic + "-group";
        try (Admin a = newAdmin(bootstrap)) {
            step(out, "createTopics", () -> {
                a.createTopics(List.of(new NewTopic(topic, 3, (short) 3).configs(Map.of("retention.ms", "7200000")))).all().get();
                return "created";
            });
            step(out, "createTopics_duplicate", () -> a.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get());
            step(out, "createTopics_bad_rf", () -> a.createTopics(List.of(new NewTopic(topic + "-rf", 1, (short) 7))).all().get());
            step(out, "describeTopics", () -> {
                TopicDescription d = a.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
                // A new topic's partitions elect their leaders (raftlog: one Raft group each)
                // just after CreateTopics answers: ask again until each has one, up to 30 s.
                for (int i = 0; i < 60 && d.partitions().stream().anyMatch(p -> p.leader() == null); i++) {
                    Thread.sleep(500);
                    d = a.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
                }
                List<Object> ps = new ArrayList<>();
                for (TopicPartitionInfo p : d.partitions())
                    ps.add(List.of(p.partition(), p.replicas().size(), p.isr().size(), p.replicas().contains(p.leader())));
                return List.of(d.name(), d.isInternal(), ps);
            });
            step(out, "describeTopics_unknown", () -> a.describeTopics(List.of("no-such-topic")).allTopicNames().get());
            step(out, "describeCluster", () -> {
                DescribeClusterResult r = a.describeCluster();
                return List.of(r.nodes().get().size(), r.controller().get() != null, r.clusterId().get() != null);
            });
            ConfigResource tr = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            step(out, "describeConfigs_topic", () -> {
                Config c = a.describeConfigs(List.of(tr)).all().get().get(tr);
                Map<String, Object> m = new TreeMap<>();
                for (String k : List.of("retention.ms", "cleanup.policy", "segment.bytes", "max.message.bytes", "compression.type", "min.insync.replicas")) {
                    ConfigEntry e = c.get(k);
                    m.put(k, e == null ? null : List.of(String.valueOf(e.value()), e.source().name(), e.isReadOnly()));
                }
                return m;
            });
            String broker = a.describeCluster().nodes().get().iterator().next().idString();
            ConfigResource br = new ConfigResource(ConfigResource.Type.BROKER, broker);
            step(out, "describeConfigs_broker", () -> {
                Config c = a.describeConfigs(List.of(br)).all().get().get(br);
                Map<String, Object> m = new TreeMap<>();
                for (String k : List.of("num.partitions", "default.replication.factor", "auto.create.topics.enable", "log.retention.hours", "message.max.bytes"))
                    m.put(k, c.get(k) == null ? null : c.get(k).value());
                return m;
            });
            step(out, "incrementalAlterConfigs", () -> {
                a.incrementalAlterConfigs(Map.of(tr, List.of(
                        new AlterConfigOp(new ConfigEntry("retention.ms", "3600000"), AlterConfigOp.OpType.SET),
                        new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"), AlterConfigOp.OpType.APPEND)))).all().get();
                // Kafka's brokers apply a config change a moment after the answer: ask again
                // until both values moved, up to 30 s (raftlog's image has them at once).
                List<Object> seen = null;
                for (int i = 0; i < 60; i++) {
                    Config c = a.describeConfigs(List.of(tr)).all().get().get(tr);
                    List<String> policy = new ArrayList<>(List.of(c.get("cleanup.policy").value().split(",")));
                    Collections.sort(policy);  // a set of policies: raftlog lists them in its canonical order
                    seen = List.of(c.get("retention.ms").value(), policy);
                    if (seen.equals(List.of("3600000", List.of("compact", "delete"))))
                        break;
                    Thread.sleep(500);
                }
                return seen;
            });
            step(out, "incrementalAlterConfigs_unknown_key", () -> a.incrementalAlterConfigs(Map.of(tr, List.of(
                    new AlterConfigOp(new ConfigEntry("no.such.config", "1"), AlterConfigOp.OpType.SET)))).all().get());
            step(out, "createPartitions", () -> {
                a.createPartitions(Map.of(topic, NewPartitions.increaseTo(4))).all().get();
                // Kafka's brokers learn of the new partition a moment after the answer: ask again
                // until the count moves, up to 30 s (raftlog's image has it at once).
                int n = 0;
                for (int i = 0; i < 60 && (n = a.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().size()) < 4; i++)
                    Thread.sleep(500);
                return n;
            });
            step(out, "createPartitions_decrease", () -> a.createPartitions(Map.of(topic, NewPartitions.increaseTo(2))).all().get());
            try (KafkaProducer<String, String> p = producer(bootstrap, "all", "none")) {
                for (int i = 0; i < 10; i++) p.send(new ProducerRecord<>(topic, 0, "k", "v" + i)).get(30, TimeUnit.SECONDS);
            }
            TopicPartition tp0 = new TopicPartition(topic, 0);
            step(out, "deleteRecords", () -> a.deleteRecords(Map.of(tp0, RecordsToDelete.beforeOffset(4))).lowWatermarks().get(tp0).get().lowWatermark());
            step(out, "deleteRecords_past_end", () -> a.deleteRecords(Map.of(tp0, RecordsToDelete.beforeOffset(99))).lowWatermarks().get(tp0).get().lowWatermark());
            step(out, "listOffsets", () -> {
                Map<TopicPartition, OffsetSpec> q = Map.of(tp0, OffsetSpec.earliest());
                long e = a.listOffsets(q).partitionResult(tp0).get().offset();
                long l = a.listOffsets(Map.of(tp0, OffsetSpec.latest())).partitionResult(tp0).get().offset();
                long m = a.listOffsets(Map.of(tp0, OffsetSpec.maxTimestamp())).partitionResult(tp0).get().offset();
                return List.of(e, l, m);
            });
            step(out, "alterConsumerGroupOffsets", () -> {
                a.alterConsumerGroupOffsets(group, Map.of(tp0, new OffsetAndMetadata(6, "meta"),
                        new TopicPartition(topic, 1), new OffsetAndMetadata(0))).all().get();
                return "altered";
            });
            step(out, "listConsumerGroups", () -> {
                for (GroupListing g : a.listGroups().all().get())
                    if (g.groupId().equals(group)) return List.of(g.type().map(Object::toString).orElse("?"), g.protocol(), g.groupState().map(Object::toString).orElse("?"));
                return "missing";
            });
            step(out, "describeConsumerGroups", () -> {
                ConsumerGroupDescription d = a.describeConsumerGroups(List.of(group)).all().get().get(group);
                return List.of(d.groupState().toString(), d.members().size(), d.isSimpleConsumerGroup(), d.type().toString());
            });
            step(out, "describeConsumerGroups_unknown", () -> {
                ConsumerGroupDescription d = a.describeConsumerGroups(List.of("no-such-group")).all().get().get("no-such-group");
                return List.of(d.groupState().toString(), d.members().size());
            });
            step(out, "listConsumerGroupOffsets", () -> {
                Map<String, Object> m = new TreeMap<>();
                for (Map.Entry<TopicPartition, OffsetAndMetadata> e : a.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get().entrySet())
                    m.put(e.getKey().toString(), List.of(e.getValue().offset(), e.getValue().metadata()));
                return m;
            });
            step(out, "deleteConsumerGroupOffsets", () -> {
                a.deleteConsumerGroupOffsets(group, Set.of(tp0)).all().get();
                return a.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get().keySet().toString();
            });
            step(out, "deleteConsumerGroups", () -> { a.deleteConsumerGroups(List.of(group)).all().get(); return "deleted"; });
            step(out, "describeLogDirs", () -> {
                List<Integer> ids = new ArrayList<>();
                for (Node n : a.describeCluster().nodes().get()) ids.add(n.id());
                Map<Integer, Map<String, LogDirDescription>> d = a.describeLogDirs(ids).allDescriptions().get();
                List<Object> per = new ArrayList<>();
                for (Map<String, LogDirDescription> dirs : d.values()) {
                    int parts = 0;
                    for (LogDirDescription ld : dirs.values())
                        for (TopicPartition t : ld.replicaInfos().keySet()) if (t.topic().equals(topic)) parts++;
                    per.add(List.of(dirs.size(), parts));
                }
                return per;
            });
            step(out, "describeFeatures", () -> a.describeFeatures().featureMetadata().get().finalizedFeatures().containsKey("metadata.version"));
            step(out, "describeMetadataQuorum", () -> {
                QuorumInfo q = a.describeMetadataQuorum().quorumInfo().get();
                return List.of(q.voters().size(), q.leaderId() >= 0);
            });
            step(out, "describeProducers", () -> a.describeProducers(List.of(tp0)).partitionResult(tp0).get().activeProducers().size());
            step(out, "describeClientQuotas", () -> a.describeClientQuotas(ClientQuotaFilter.all()).entities().get().size());
            step(out, "describeAcls", () -> a.describeAcls(AclBindingFilter.ANY).values().get().size());
            step(out, "deleteTopics", () -> { a.deleteTopics(List.of(topic)).all().get(); return "deleted"; });
        }
        return out;
    }

    /** Transactions (issue 42): a transactional producer's committed, aborted and open
     * transactions as read_committed and read_uncommitted consumers see them (records and the
     * end offset, the LSO); consume-transform-produce with sendOffsetsToTransaction; a zombie
     * fenced by a second producer with its transactional.id. Every step's answer or error. */
    static class Transactions {
        static KafkaProducer<String, String> txnProducer(String bootstrap, String tid) {
            Properties p = props(bootstrap);
            p.put("transactional.id", tid);
            p.put("key.serializer", StringSerializer.class.getName());
            p.put("value.serializer", StringSerializer.class.getName());
            KafkaProducer<String, String> producer = new KafkaProducer<>(p);
            producer.initTransactions();
            return producer;
        }

        static void send(KafkaProducer<String, String> p, String topic, String prefix, int n) {
            for (int i = 0; i < n; i++) p.send(new ProducerRecord<>(topic, i % 3, "k" + i, prefix + i));
        }

        /** (partition, offset, value) of every record `isolation` lets a reader see, read from
         * the beginning up to the end offsets it is given (the LSO for read_committed), again
         * until every partition's end offset is `end` (if >= 0) and `atLeast` records came (the
         * markers are written after EndTxn answers, on both brokers), or 60 s. */
        static Map<String, Object> read(String bootstrap, String topic, String isolation, long end, int atLeast) {
            Map<String, Object> out = new LinkedHashMap<>();
            long deadline = System.currentTimeMillis() + 60_000;
            List<Object> rows = new ArrayList<>();
            Map<TopicPartition, Long> ends = Map.of();
            while (System.currentTimeMillis() < deadline) {
                rows = new ArrayList<>();
                try (KafkaConsumer<String, String> c = consumer(bootstrap, Map.of("isolation.level", isolation))) {
                    List<TopicPartition> tps = new ArrayList<>();
                    for (int i = 0; i < 3; i++) tps.add(new TopicPartition(topic, i));
                    c.assign(tps);
                    c.seekToBeginning(tps);
                    Map<TopicPartition, Long> e = c.endOffsets(tps);
                    ends = e;
                    while (System.currentTimeMillis() < deadline && tps.stream().anyMatch(tp -> c.position(tp) < e.get(tp)))
                        for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(300)))
                            rows.add(List.of(r.partition(), r.offset(), r.value()));
                }
                if ((end < 0 || ends.values().stream().allMatch(o -> o == end)) && rows.size() >= atLeast) break;
            }
            rows.sort(Comparator.comparing(Object::toString));
            out.put("records", rows);
            List<Long> endOffsets = new ArrayList<>();
            for (int i = 0; i < 3; i++) endOffsets.add(ends.get(new TopicPartition(topic, i)));
            out.put("end_offsets", endOffsets);
            return out;
        }

        static Object run(String bootstrap, String name) throws Exception {
            Map<String, Object> out = new LinkedHashMap<>();
            String topic = name, in = name + "-in", ctpOut = name + "-out";
            for (String t : List.of(topic, in, ctpOut)) ensureTopic(bootstrap, t, 3);
            try (KafkaProducer<String, String> p = txnProducer(bootstrap, name + "-tx")) {
                step(out, "commit", () -> { p.beginTransaction(); send(p, topic, "c", 9); p.commitTransaction(); return "committed"; });
                step(out, "abort", () -> { p.beginTransaction(); send(p, topic, "a", 6); p.flush(); p.abortTransaction(); return "aborted"; });
                step(out, "open", () -> { p.beginTransaction(); send(p, topic, "o", 3); p.flush(); return "open"; });
                out.put("read_committed_open", read(bootstrap, topic, "read_committed", 7, 9));
                out.put("read_uncommitted_open", read(bootstrap, topic, "read_uncommitted", 8, 18));
                step(out, "commit_open", () -> { p.commitTransaction(); return "committed"; });
                out.put("read_committed_after", read(bootstrap, topic, "read_committed", 9, 12));
            }
            // Consume-transform-produce: each input record's output and the input offsets in one transaction.
            try (KafkaProducer<String, String> plain = producer(bootstrap, "all", "none")) {
                for (int i = 0; i < 12; i++) plain.send(new ProducerRecord<>(in, i % 3, "k" + i, "in" + i)).get(30, TimeUnit.SECONDS);
            }
            String group = name + "-ctp";
            try (KafkaProducer<String, String> p = txnProducer(bootstrap, name + "-ctp-tx");
                 KafkaConsumer<String, String> c = consumer(bootstrap, Map.of("group.id", group, "isolation.level", "read_committed"))) {
                c.subscribe(List.of(in));
                int seen = 0, transactions = 0;
                long deadline = System.currentTimeMillis() + 60_000;
                while (seen < 12 && System.currentTimeMillis() < deadline) {
                    ConsumerRecords<String, String> rs = c.poll(Duration.ofMillis(500));
                    if (rs.isEmpty()) continue;
                    p.beginTransaction();
                    Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                    for (ConsumerRecord<String, String> r : rs) {
                        p.send(new ProducerRecord<>(ctpOut, r.partition(), r.key(), r.value() + "!"));
                        offsets.put(new TopicPartition(in, r.partition()), new OffsetAndMetadata(r.offset() + 1));
                        seen++;
                    }
                    p.sendOffsetsToTransaction(offsets, c.groupMetadata());
                    p.commitTransaction();
                    transactions++;
                }
                out.put("ctp_seen", seen);
                out.put("ctp_some_transactions", transactions > 0);
            }
            List<Object> outValues = new ArrayList<>();
            for (Object row : (List<?>) read(bootstrap, ctpOut, "read_committed", -1, 12).get("records"))
                outValues.add(((List<?>) row).get(2));
            Collections.sort(outValues, Comparator.comparing(Object::toString));
            out.put("ctp_output", outValues);
            try (Admin a = newAdmin(bootstrap)) {
                Map<String, Long> committed = new TreeMap<>();
                a.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get()
                 .forEach((tp, om) -> committed.put(tp.toString(), om.offset()));
                out.put("ctp_group_offsets", committed);
            }
            // Zombie fencing: a second producer with the same transactional.id fences the first.
            String zombieTopic = name + "-zombie";
            ensureTopic(bootstrap, zombieTopic, 3);
            KafkaProducer<String, String> old = txnProducer(bootstrap, name + "-z");
            try {
                old.beginTransaction();
                old.send(new ProducerRecord<>(zombieTopic, 0, "k", "zombie-1"));
                old.flush();
                try (KafkaProducer<String, String> fresh = txnProducer(bootstrap, name + "-z")) {
                    step(out, "fresh_commit", () -> {
                        fresh.beginTransaction();
                        fresh.send(new ProducerRecord<>(zombieTopic, 0, "k", "new"));
                        fresh.commitTransaction();
                        return "committed";
                    });
                    step(out, "zombie_send", () -> old.send(new ProducerRecord<>(zombieTopic, 1, "k", "zombie-2")).get(30, TimeUnit.SECONDS).partition());
                    step(out, "zombie_commit", () -> { old.commitTransaction(); return "committed"; });
                }
            } finally {
                old.close(Duration.ofSeconds(5));
            }
            List<Object> visible = new ArrayList<>();
            for (Object row : (List<?>) read(bootstrap, zombieTopic, "read_committed", -1, 1).get("records"))
                visible.add(((List<?>) row).get(2));
            out.put("zombie_topic_read_committed", visible);
            return out;
        }
    }
}
