import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.Future;
import java.util.stream.Collectors;

import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Kafka's own Java client as a peer of a broker under test: an idempotent producer (acks=all),
 * a transactional producer (committed and aborted transactions), a read_committed consumer in a
 * classic group, and the AdminClient. Each step prints one JSON line ({"step": ..., ...}) for the
 * test to check; the program judges nothing itself.
 *
 * Usage: ClientPeer BOOTSTRAP TOPIC GROUP TRANSACTIONAL_ID
 */
public final class ClientPeer {
    static final int PARTITIONS = 3;
    static final int IDEMPOTENT_RECORDS = 1000;
    static final int PER_TRANSACTION = 100;
    static final ObjectMapper JSON = new ObjectMapper();

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2], transactionalId = args[3];
        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, PARTITIONS, (short) 1))).all().get();
            TopicDescription described = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            print("create_topic", Map.of(
                "partitions", described.partitions().size(),
                "leaders", described.partitions().stream().map(p -> p.leader().id()).collect(Collectors.toList()),
                "internal", described.isInternal()));

            produceIdempotently(bootstrap, topic);
            produceTransactionally(bootstrap, topic, transactionalId);
            consumeReadCommitted(bootstrap, topic, group);
            listOffsets(admin, topic);

            Collection<ConsumerGroupListing> groups = admin.listConsumerGroups().all().get();
            List<String> names = groups.stream().map(ConsumerGroupListing::groupId).sorted().collect(Collectors.toList());
            String state = groups.stream().filter(g -> g.groupId().equals(group))
                .map(g -> g.groupState().map(Object::toString).orElse("?")).findFirst().orElse("absent");
            Map<TopicPartition, OffsetAndMetadata> committed =
                admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            Map<String, Long> committedOffsets = new HashMap<>();
            committed.forEach((tp, om) -> committedOffsets.put(Integer.toString(tp.partition()), om.offset()));
            print("list_groups", Map.of("groups", names, "state", state, "committed", committedOffsets));
        }
    }

    static void produceIdempotently(String bootstrap, String topic) throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.LINGER_MS_CONFIG, 5);
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < IDEMPOTENT_RECORDS; i++) {
                sent.add(producer.send(new ProducerRecord<>(topic, "key-" + i, "idempotent-" + i)));
            }
            producer.flush();
            Map<String, Integer> perPartition = new HashMap<>();
            Set<String> positions = new HashSet<>();
            for (Future<RecordMetadata> future : sent) {
                RecordMetadata metadata = future.get();
                perPartition.merge(Integer.toString(metadata.partition()), 1, Integer::sum);
                positions.add(metadata.partition() + "@" + metadata.offset());
            }
            print("idempotent_produce", Map.of("acked", sent.size(), "distinct_positions", positions.size(),
                "per_partition", perPartition));
        }
    }

    static void produceTransactionally(String bootstrap, String topic, String transactionalId) throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        List<String> outcomes = new ArrayList<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props, new StringSerializer(), new StringSerializer())) {
            producer.initTransactions();
            String[] plan = {"commit", "abort", "commit"};
            for (int t = 0; t < plan.length; t++) {
                producer.beginTransaction();
                String prefix = plan[t].equals("commit") ? "committed-" : "aborted-";
                for (int i = 0; i < PER_TRANSACTION; i++) {
                    producer.send(new ProducerRecord<>(topic, "txn-" + t + "-" + i, prefix + t + "-" + i));
                }
                producer.flush();
                if (plan[t].equals("commit")) {
                    producer.commitTransaction();
                } else {
                    producer.abortTransaction();
                }
                outcomes.add(plan[t]);
            }
        }
        print("transactional_produce", Map.of("transactions", outcomes));
    }

    static void consumeReadCommitted(String bootstrap, String topic, String group) throws Exception {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, IsolationLevel.READ_COMMITTED.toString());
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        int expected = IDEMPOTENT_RECORDS + 2 * PER_TRANSACTION;
        Map<String, Integer> seen = new HashMap<>();
        long deadline = System.currentTimeMillis() + 60_000;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props, new StringDeserializer(), new StringDeserializer())) {
            consumer.subscribe(List.of(topic));
            int total = 0;
            while (total < expected && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(200))) {
                    seen.merge(record.value(), 1, Integer::sum);
                    total++;
                }
                consumer.commitSync();
            }
            // One more poll: nothing may follow the last committed transaction.
            int after = consumer.poll(Duration.ofMillis(500)).count();
            consumer.commitSync();
            long aborted = seen.keySet().stream().filter(v -> v.startsWith("aborted-")).count();
            long committedTxn = seen.keySet().stream().filter(v -> v.startsWith("committed-")).count();
            long idempotent = seen.keySet().stream().filter(v -> v.startsWith("idempotent-")).count();
            long duplicates = seen.values().stream().filter(n -> n > 1).count();
            print("consume_read_committed", Map.of("records", total + after, "distinct", seen.size(),
                "idempotent", idempotent, "committed", committedTxn, "aborted", aborted,
                "duplicates", duplicates, "assignment", consumer.assignment().size()));
        }
    }

    static void listOffsets(Admin admin, String topic) throws Exception {
        Map<String, Object> result = new LinkedHashMap<>();
        for (String spec : List.of("earliest", "latest", "latest_committed")) {
            Map<TopicPartition, OffsetSpec> request = new HashMap<>();
            for (int p = 0; p < PARTITIONS; p++) {
                request.put(new TopicPartition(topic, p), spec.equals("earliest") ? OffsetSpec.earliest() : OffsetSpec.latest());
            }
            IsolationLevel isolation = spec.equals("latest_committed") ? IsolationLevel.READ_COMMITTED : IsolationLevel.READ_UNCOMMITTED;
            Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> offsets =
                admin.listOffsets(request, new ListOffsetsOptions(isolation)).all().get();
            Map<String, Long> byPartition = new HashMap<>();
            offsets.forEach((tp, info) -> byPartition.put(Integer.toString(tp.partition()), info.offset()));
            result.put(spec, byPartition);
        }
        print("list_offsets", result);
    }

    static void print(String step, Map<String, ?> fields) throws Exception {
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("step", step);
        line.putAll(fields);
        System.out.println(JSON.writeValueAsString(line));
        System.out.flush();
    }
}
