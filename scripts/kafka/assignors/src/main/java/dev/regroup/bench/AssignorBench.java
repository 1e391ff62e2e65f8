package dev.regroup.bench;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.Random;
import java.util.Set;

import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.utils.internals.AppInfoParser;
import org.apache.kafka.coordinator.common.runtime.CoordinatorMetadataDelta;
import org.apache.kafka.coordinator.common.runtime.CoordinatorMetadataImage;
import org.apache.kafka.coordinator.group.api.assignor.ConsumerGroupPartitionAssignor;
import org.apache.kafka.coordinator.group.api.assignor.GroupAssignment;
import org.apache.kafka.coordinator.group.api.assignor.GroupSpec;
import org.apache.kafka.coordinator.group.api.assignor.MemberAssignment;
import org.apache.kafka.coordinator.group.api.assignor.SubscribedTopicDescriber;
import org.apache.kafka.coordinator.group.api.assignor.SubscriptionType;
import org.apache.kafka.coordinator.group.assignor.RangeAssignor;
import org.apache.kafka.coordinator.group.assignor.UniformAssignor;
import org.apache.kafka.coordinator.group.modern.Assignment;
import org.apache.kafka.coordinator.group.modern.GroupSpecImpl;
import org.apache.kafka.coordinator.group.modern.MemberSubscriptionAndAssignmentImpl;
import org.apache.kafka.coordinator.group.modern.SubscribedTopicDescriberImpl;

/**
 * A warmed timing loop around Kafka's server-side assignors, on the cells of regroup's
 * `bench assignors` grid.
 *
 * <p>Inputs mirror Kafka's ServerSideAssignorBenchmark (jmh-benchmarks, org.apache.kafka.jmh.assignor)
 * and regroup/bench/assignors.py: members "member0".."memberN-1", topics "topic-0".. with
 * {@code members * ppm / topics} partitions each; heterogeneous groups split members and topics into
 * 5 buckets; incremental assigns {@code members - 1} members first, then times the assignment of the
 * group with that result as every member's current assignment plus "newMember" (subscribed like
 * the last existing member when heterogeneous, to every topic when homogeneous). Members of a bucket
 * share one topic-id set. Only {@code assign()} is timed.
 *
 * <p>Protocol: arguments {@code warmupMs measureMs minRuns maxRuns warmupCalls}; one cell per stdin line,
 * {@code assignor subscription mode members ppm topics}; one JSON object per line on stdout (the
 * first describes the versions).
 */
public final class AssignorBench {
    private static final int BUCKETS = 5; // Kafka's MAX_BUCKET_COUNT

    private AssignorBench() {
    }

    /** Topic metadata as a plain map: the same lookups as the coordinator's image, no racks. */
    static final class Image implements CoordinatorMetadataImage {
        private final Map<Uuid, Topic> byId = new LinkedHashMap<>();
        private final Map<String, Topic> byName = new LinkedHashMap<>();

        record Topic(String name, Uuid id, int partitionCount) implements TopicMetadata {
            @Override
            public List<String> partitionRacks(int partition) {
                return List.of();
            }
        }

        void add(String name, Uuid id, int partitions) {
            Topic t = new Topic(name, id, partitions);
            byId.put(id, t);
            byName.put(name, t);
        }

        @Override
        public Set<Uuid> topicIds() {
            return Collections.unmodifiableSet(byId.keySet());
        }

        @Override
        public Set<String> topicNames() {
            return Collections.unmodifiableSet(byName.keySet());
        }

        @Override
        public Optional<TopicMetadata> topicMetadata(String name) {
            return Optional.ofNullable(byName.get(name));
        }

        @Override
        public Optional<TopicMetadata> topicMetadata(Uuid id) {
            return Optional.ofNullable(byId.get(id));
        }

        @Override
        public CoordinatorMetadataDelta emptyDelta() {
            throw new UnsupportedOperationException();
        }

        @Override
        public long version() {
            return 1;
        }

        @Override
        public boolean isEmpty() {
            return byId.isEmpty();
        }
    }

    /** One prepared cell: the spec to time, and its describer. */
    record Prepared(ConsumerGroupPartitionAssignor assignor, GroupSpec spec,
                    SubscribedTopicDescriber describer, long partitions) {
    }

    static ConsumerGroupPartitionAssignor assignor(String name) {
        return switch (name) {
            case "uniform" -> new UniformAssignor();
            case "range" -> new RangeAssignor();
            default -> throw new IllegalArgumentException("unknown assignor " + name);
        };
    }

    /** Subscriptions of members 0..count-1, as AssignorBenchmarkUtils builds them (bucket sets shared). */
    static List<Set<Uuid>> subscriptions(int count, List<Uuid> topics, boolean heterogeneous) {
        List<Set<Uuid>> subs = new ArrayList<>(count);
        if (!heterogeneous) {
            Set<Uuid> all = new HashSet<>(topics);
            for (int i = 0; i < count; i++) {
                subs.add(all);
            }
            return subs;
        }
        int buckets = Math.min(BUCKETS, count);
        int topicsPerBucket = (topics.size() + buckets - 1) / buckets;
        int membersPerBucket = (count + buckets - 1) / buckets;
        for (int b = 0; b < buckets; b++) {
            Set<Uuid> bucket = new HashSet<>(
                topics.subList(Math.min(b * topicsPerBucket, topics.size()),
                               Math.min((b + 1) * topicsPerBucket, topics.size())));
            int size = Math.min((b + 1) * membersPerBucket, count) - b * membersPerBucket;
            for (int i = 0; i < size; i++) {
                subs.add(bucket);
            }
        }
        return subs;
    }

    static Prepared prepare(String name, boolean heterogeneous, boolean incremental, int members,
                            int ppm, int topicCount) {
        int perTopic = members * ppm / topicCount;
        Image image = new Image();
        List<Uuid> topicIds = new ArrayList<>(topicCount);
        Random random = new Random(42);
        for (int i = 0; i < topicCount; i++) {
            Uuid id = new Uuid(random.nextLong(), random.nextLong());
            topicIds.add(id);
            image.add("topic-" + i, id, perTopic);
        }
        SubscribedTopicDescriber describer = new SubscribedTopicDescriberImpl(image);
        SubscriptionType type = heterogeneous ? SubscriptionType.HETEROGENEOUS : SubscriptionType.HOMOGENEOUS;
        ConsumerGroupPartitionAssignor assignor = assignor(name);

        int existing = incremental ? members - 1 : members;
        List<Set<Uuid>> subs = subscriptions(existing, topicIds, heterogeneous);
        Map<String, MemberSubscriptionAndAssignmentImpl> specs = new HashMap<>();
        for (int i = 0; i < existing; i++) {
            specs.put("member" + i, new MemberSubscriptionAndAssignmentImpl(
                Optional.empty(), Optional.empty(), subs.get(i), Assignment.EMPTY));
        }
        GroupSpec spec = new GroupSpecImpl(specs, type, Map.of());
        if (incremental) {
            GroupAssignment before = assignor.assign(spec, describer);
            Map<String, MemberSubscriptionAndAssignmentImpl> next = new HashMap<>();
            Map<Uuid, Map<Integer, String>> inverted = new HashMap<>();
            for (int i = 0; i < existing; i++) {
                String mid = "member" + i;
                MemberAssignment got = before.members().get(mid);
                Map<Uuid, Set<Integer>> parts = got == null ? Map.of() : got.partitions();
                next.put(mid, new MemberSubscriptionAndAssignmentImpl(
                    Optional.empty(), Optional.empty(), subs.get(i),
                    new Assignment(Collections.unmodifiableMap(parts))));
                for (Map.Entry<Uuid, Set<Integer>> e : parts.entrySet()) {
                    Map<Integer, String> owners = inverted.computeIfAbsent(e.getKey(), k -> new HashMap<>());
                    for (Integer p : e.getValue()) {
                        owners.put(p, mid);
                    }
                }
            }
            Set<Uuid> joiner = heterogeneous ? subs.get(existing - 1) : new HashSet<>(topicIds);
            next.put("newMember", new MemberSubscriptionAndAssignmentImpl(
                Optional.empty(), Optional.empty(), joiner, Assignment.EMPTY));
            spec = new GroupSpecImpl(next, type, inverted);
        }
        return new Prepared(assignor, spec, describer, (long) perTopic * topicCount);
    }

    static String cell(String line, long warmupNs, long measureNs, int minRuns, int maxRuns,
                       int warmupCalls) {
        String[] f = line.trim().split("\\s+");
        String name = f[0];
        boolean heterogeneous = f[1].equals("heterogeneous");
        boolean incremental = f[2].equals("incremental");
        int members = Integer.parseInt(f[3]);
        int ppm = Integer.parseInt(f[4]);
        int topics = Integer.parseInt(f[5]);
        Prepared p = prepare(name, heterogeneous, incremental, members, ppm, topics);

        // Warm-up: until the time is spent and enough calls were made, so the JIT has compiled the path.
        GroupAssignment result = null;
        long start = System.nanoTime();
        int warm = 0;
        while (warm < warmupCalls || System.nanoTime() - start < warmupNs) {
            result = p.assignor.assign(p.spec, p.describer);
            warm++;
        }
        long assigned = 0;
        for (MemberAssignment m : result.members().values()) {
            for (Set<Integer> s : m.partitions().values()) {
                assigned += s.size();
            }
        }
        int membersOut = result.members().size();
        result = null;

        // Wall-clock and this thread's CPU time (which leaves out waiting for a core on a loaded
        // machine, and GC work done by the collector's own threads).
        ThreadMXBean threads = ManagementFactory.getThreadMXBean();
        List<Long> times = new ArrayList<>();
        long bestCpu = Long.MAX_VALUE;
        long began = System.nanoTime();
        while (times.size() < maxRuns && (times.size() < minRuns || System.nanoTime() - began < measureNs)) {
            long c0 = threads.getCurrentThreadCpuTime();
            long t0 = System.nanoTime();
            GroupAssignment r = p.assignor.assign(p.spec, p.describer);
            long t1 = System.nanoTime();
            long c1 = threads.getCurrentThreadCpuTime();
            if (r.members().isEmpty()) {
                throw new IllegalStateException("empty assignment");
            }
            times.add(t1 - t0);
            bestCpu = Math.min(bestCpu, c1 - c0);
        }
        long[] sorted = times.stream().mapToLong(Long::longValue).toArray();
        Arrays.sort(sorted);
        double best = sorted[0] / 1e6;
        double median = sorted.length % 2 == 1 ? sorted[sorted.length / 2] / 1e6
            : (sorted[sorted.length / 2 - 1] + sorted[sorted.length / 2]) / 2e6;
        return String.format(Locale.ROOT,
            "{\"assignor\": \"%s\", \"subscription\": \"%s\", \"mode\": \"%s\", \"members\": %d, "
                + "\"partitions_per_member\": %d, \"topics\": %d, \"partitions\": %d, \"warmup_runs\": %d, "
                + "\"runs\": %d, \"best_ms\": %.4f, \"median_ms\": %.4f, \"best_cpu_ms\": %.4f, "
                + "\"assigned\": %d, \"members_out\": %d}",
            name, f[1], f[2], members, ppm, topics, p.partitions, warm, sorted.length, best, median,
            bestCpu / 1e6, assigned, membersOut);
    }

    public static void main(String[] args) throws Exception {
        long warmupNs = (long) (Double.parseDouble(args.length > 0 ? args[0] : "500") * 1e6);
        long measureNs = (long) (Double.parseDouble(args.length > 1 ? args[1] : "500") * 1e6);
        int minRuns = Integer.parseInt(args.length > 2 ? args[2] : "5");
        int maxRuns = Integer.parseInt(args.length > 3 ? args[3] : "200");
        int warmupCalls = Math.max(1, Integer.parseInt(args.length > 4 ? args[4] : "20"));
        System.out.printf(Locale.ROOT,
            "{\"java\": \"%s\", \"vm\": \"%s\", \"kafka\": \"%s\", \"processors\": %d, \"max_heap_mb\": %d}%n",
            System.getProperty("java.version"), System.getProperty("java.vm.name"),
            AppInfoParser.getVersion(), Runtime.getRuntime().availableProcessors(),
            Runtime.getRuntime().maxMemory() >> 20);
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            System.out.println(cell(line, warmupNs, measureNs, minRuns, maxRuns, warmupCalls));
            System.out.flush();
        }
    }
}
