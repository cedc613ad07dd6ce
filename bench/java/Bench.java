// Benchmark peer: the official Apache RocketMQ 5 Java client (rocketmq-client-java, gRPC),
// driven the way mqlease is benchmarked. Single file, no build step of its own:
//
//   java -cp '<lib>/*' bench/java/Bench.java MODE ARGS...     (Java 17 source launcher)
//
// bench/java.sh fetches <lib> and runs this with the JVM flags the benchmark uses.
//
// Modes (ENDPOINT is host:port of the gRPC proxy, e.g. 127.0.0.1:18081):
//   produce ENDPOINT TOPIC COUNT SIZE
//       COUNT messages of SIZE bytes, tag "bench", one synchronous send at a time.
//       {"mode":"produce","count":N,"seconds":S,"msgs_per_s":R,"rss_kb":K}
//   sendasync ENDPOINT TOPIC COUNT SIZE INFLIGHT
//       COUNT messages of SIZE bytes, tag "bench", through Producer.sendAsync with at most
//       INFLIGHT sends outstanding (a semaphore taken before each send, given back when its
//       future completes). WARMUP (environment, default 1000) sends the same way first, outside
//       the window (JIT, connections); cpu_us_per_msg is the process's CPU time over the window.
//       {"mode":"sendasync","count":N,"failed":F,"seconds":S,"msgs_per_s":R,"cpu_us_per_msg":C,
//        "inflight":I,"rss_kb":K}
//   consume ENDPOINT GROUP TOPIC COUNT INVISIBLE_S BATCH [sync|async]
//       receive(BATCH, INVISIBLE_S) in a loop and ack every message, until COUNT messages are
//       acked or 120 s have passed since the first receive call (where timing starts).
//       Ack mode (default async): the official API has no batch ack, so "async" issues
//       ackAsync for every message of a batch and waits for all of them before the next
//       receive (one RPC per message, all in flight together); "sync" calls ack() one by one.
//       {"mode":"consume","count":N,"seconds":S,"msgs_per_s":R,"cpu_s_per_10k":C,"rss_kb":K}
//   push ENDPOINT GROUP TOPIC COUNT
//       PushConsumer (the client's defaults: 20 consumption threads, its own cache and ack)
//       with a no-op listener returning SUCCESS, until COUNT messages were consumed or 120 s
//       passed. cpu_s_per_10k is the process's CPU time (OperatingSystemMXBean, the same
//       utime+stime /proc/PID/stat shows) from before the consumer is built to the end.
//       {"mode":"push","count":N,"seconds":S,"msgs_per_s":R,"cpu_s_per_10k":C,"rss_kb":K}
//   hold ENDPOINT GROUP TOPIC COUNT INVISIBLE_S HOLD_S
//       Receives COUNT messages (batches of up to 32, invisible INVISIBLE_S), keeps every one alive for HOLD_S s
//       after the last arrived by calling changeInvisibleDuration(view, INVISIBLE_S) on it
//       every INVISIBLE_S/3 s from ONE thread (the official SimpleConsumer has no auto-renew),
//       then acks all. Message i is due at recv_i + k*INVISIBLE_S/3 (fixed rate); lateness is
//       (time the call was issued) - (its due time). Renewal starts as soon as a message
//       arrives, so messages received early survive a slow receive phase.
//       {"mode":"hold","count":N,"renewals":R,"renew_fail":F,"renew_p50_ms":..,
//        "renew_p99_ms":..,"lateness_p99_ms":..,"rss_kb":K}
//   leases ENDPOINT GROUP TOPIC COUNT INVISIBLE_S HOLD_S INFLIGHT
//       The cost of holding COUNT leases, as bench/lease.lua hold measures mqlease's: receives
//       COUNT messages (batches of 32, invisible INVISIBLE_S) and keeps them all, renewing each
//       every INVISIBLE_S/3 s (fixed rate from its receipt) with changeInvisibleDurationAsync,
//       at most INFLIGHT renewals outstanding (mqlease keeps 512), a message's next renewal
//       scheduled when its last one answers. From 1.5 renewal periods after the fill, a window
//       of HOLD_S s: the process's CPU over the renewals answered in it, and with
//       BENCH_BROKER_PID the broker's. bytes_per_lease: VmRSS growth from before the first receive to all held,
//       over COUNT (heap as the JVM grew it: -Xmx bounds it). Then acks all.
//       {"mode":"leases","count":N,"fill_s":..,"renewals_per_s":..,"renew_fail":F,
//        "cpu_us_per_renewal":..,"broker_cpu_us_per_renewal":..,"lateness_p99_ms":..,
//        "bytes_per_lease":..,"rss_kb":K}
//   drain ENDPOINT GROUP TOPIC GO_FILE IDLE_S
//       One of several workers over one backlog (bench/workers.lua's Java twin): builds its
//       SimpleConsumer, waits for GO_FILE to exist (all start together), then receive(32, 30 s)
//       and ackAsync every message of a batch, until IDLE_S s pass with nothing received.
//       {"acked":N,"start":S,"last":L,"cpu_s":C,"failed":F,"rss_kb":K}: start and last (the
//       last message's) in seconds on CLOCK_MONOTONIC, CPU from the start to the stop.
//
// stdout carries only the JSON line; everything else (client logs, errors) goes to stderr or to
// -Drocketmq.log.root. Exit status: 0 = complete, 3 = ran but incomplete (fewer than COUNT
// messages, failed renewals or acks; the JSON line is still printed), 2 = usage,
// 1 = could not start, 4 = internal watchdog fired.
// rss_kb is VmHWM (peak resident set) from /proc/self/status, read after the work is done.

import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.DelayQueue;
import java.util.concurrent.Delayed;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;

public final class Bench {
    static final long CONSUME_LIMIT_NS = TimeUnit.SECONDS.toNanos(120);
    static final long HOLD_RECEIVE_LIMIT_NS = TimeUnit.SECONDS.toNanos(120);
    static final int HOLD_BATCH = 32;  // receive batch size of the hold mode
    static final int DRAIN_BATCH = 32; // and of the drain mode

    // The real stdout, reserved for the JSON line. System.out is pointed at stderr so that
    // nothing else (logback status output, a console appender) can end up on stdout.
    static PrintStream json;

    public static void main(String[] args) throws Exception {
        json = System.out;
        System.setOut(System.err);
        // Defaults in case this file is run by hand without the flags bench/java.sh passes;
        // must happen before the first client class initialises logback.
        if (System.getProperty("rocketmq.log.root") == null) {
            Path dir = Path.of(System.getProperty("java.io.tmpdir"), "mqlease-jbench-logs");
            Files.createDirectories(dir);
            System.setProperty("rocketmq.log.root", dir.toString());
        }
        if (System.getProperty("rocketmq.log.level") == null) System.setProperty("rocketmq.log.level", "warn");

        if (args.length == 0) usage();
        int rc;
        try {
            switch (args[0]) {
                case "produce": {
                    if (args.length != 5) usage();
                    watchdog(600);
                    rc = produce(args[1], args[2], posInt(args[3], "COUNT"), posInt(args[4], "SIZE"));
                    break;
                }
                case "sendasync": {
                    if (args.length != 6) usage();
                    watchdog(600);
                    rc = sendAsync(args[1], args[2], posInt(args[3], "COUNT"), posInt(args[4], "SIZE"),
                        posInt(args[5], "INFLIGHT"));
                    break;
                }
                case "consume": {
                    if (args.length != 7 && args.length != 8) usage();
                    boolean async = true;
                    if (args.length == 8) {
                        if (args[7].equals("sync")) async = false;
                        else if (!args[7].equals("async")) usage();
                    }
                    int batch = posInt(args[6], "BATCH");
                    watchdog(120 + 120);
                    rc = consume(args[1], args[2], args[3], posInt(args[4], "COUNT"), posInt(args[5], "INVISIBLE_S"), batch, async);
                    break;
                }
                case "push": {
                    if (args.length != 5) usage();
                    watchdog(120 + 60);
                    rc = push(args[1], args[2], args[3], posInt(args[4], "COUNT"));
                    break;
                }
                case "hold": {
                    if (args.length != 7) usage();
                    int inv = posInt(args[5], "INVISIBLE_S"), hold = posInt(args[6], "HOLD_S");
                    watchdog(120 + hold + inv + 120);
                    rc = hold(args[1], args[2], args[3], posInt(args[4], "COUNT"), inv, hold);
                    break;
                }
                case "leases": {
                    if (args.length != 8) usage();
                    int inv = posInt(args[5], "INVISIBLE_S"), hold = posInt(args[6], "HOLD_S");
                    watchdog(300 + inv + hold + 120);
                    rc = leases(args[1], args[2], args[3], posInt(args[4], "COUNT"), inv, hold, posInt(args[7], "INFLIGHT"));
                    break;
                }
                case "drain": {
                    if (args.length != 6) usage();
                    watchdog(600);
                    rc = drain(args[1], args[2], args[3], args[4], posInt(args[5], "IDLE_S"));
                    break;
                }
                default:
                    usage();
                    return;
            }
        } catch (Exception e) {
            System.err.println("bench: " + args[0] + " failed: " + e);
            e.printStackTrace(System.err);
            rc = 1;
        }
        System.err.flush();
        // Client executors are not all daemon threads; do not wait for them.
        Runtime.getRuntime().halt(rc);
    }

    // ---------------------------------------------------------------------------------------

    static ClientConfiguration config(String endpoint) {
        return ClientConfiguration.newBuilder()
            .setEndpoints(endpoint)
            .enableSsl(false)
            .setRequestTimeout(Duration.ofSeconds(3))
            .build();
    }

    static SimpleConsumer simpleConsumer(ClientServiceProvider p, String endpoint, String group, String topic) throws Exception {
        return p.newSimpleConsumerBuilder()
            .setClientConfiguration(config(endpoint))
            .setConsumerGroup(group)
            .setSubscriptionExpressions(Map.of(topic, new FilterExpression("*", FilterExpressionType.TAG)))
            .setAwaitDuration(Duration.ofSeconds(5))
            .build();
    }

    static int produce(String endpoint, String topic, int count, int size) throws Exception {
        ClientServiceProvider p = ClientServiceProvider.loadService();
        Producer producer = p.newProducerBuilder()
            .setClientConfiguration(config(endpoint))
            .setTopics(topic)
            .build();
        byte[] body = new byte[size];
        for (int i = 0; i < size; i++) body[i] = (byte) ('a' + i % 26);
        int ok = 0, failed = 0;
        long t0 = System.nanoTime();
        for (int i = 0; i < count; i++) {
            Message m = p.newMessageBuilder().setTopic(topic).setTag("bench").setBody(body).build();
            try {
                producer.send(m);
                ok++;
            } catch (Exception e) {
                if (failed++ < 5) System.err.println("bench: send failed: " + e);
            }
        }
        double secs = (System.nanoTime() - t0) / 1e9;
        long rss = peakRssKb();
        emit(String.format(Locale.ROOT, "{\"mode\":\"produce\",\"count\":%d,\"seconds\":%.3f,\"msgs_per_s\":%.1f,\"rss_kb\":%d}",
            ok, secs, ok / secs, rss));
        if (failed > 0) System.err.println("bench: " + failed + " sends failed");
        closeQuietly(producer);
        return ok == count ? 0 : 3;
    }

    static int sendAsync(String endpoint, String topic, int count, int size, int inflight) throws Exception {
        ClientServiceProvider p = ClientServiceProvider.loadService();
        Producer producer = p.newProducerBuilder()
            .setClientConfiguration(config(endpoint))
            .setTopics(topic)
            .build();
        byte[] body = new byte[size];
        for (int i = 0; i < size; i++) body[i] = (byte) ('a' + i % 26);
        String warm = System.getenv("WARMUP");
        asyncRound(p, producer, topic, body, warm == null ? 1000 : Integer.parseInt(warm), inflight);
        long cpu0 = cpuNs(), t0 = System.nanoTime();
        int failed = asyncRound(p, producer, topic, body, count, inflight);
        double secs = (System.nanoTime() - t0) / 1e9;
        long cpu = cpuNs() - cpu0;
        int ok = count - failed;
        emit(String.format(Locale.ROOT, "{\"mode\":\"sendasync\",\"count\":%d,\"failed\":%d,\"seconds\":%.3f,"
            + "\"msgs_per_s\":%.1f,\"cpu_us_per_msg\":%.1f,\"inflight\":%d,\"rss_kb\":%d}",
            ok, failed, secs, ok / secs, cpu / 1e3 / count, inflight, peakRssKb()));
        closeQuietly(producer);
        return failed == 0 ? 0 : 3;
    }

    // n sendAsync calls with at most inflight outstanding; returns how many failed.
    static int asyncRound(ClientServiceProvider p, Producer producer, String topic, byte[] body, int n, int inflight)
            throws InterruptedException {
        java.util.concurrent.Semaphore slots = new java.util.concurrent.Semaphore(inflight);
        java.util.concurrent.CountDownLatch done = new java.util.concurrent.CountDownLatch(n);
        java.util.concurrent.atomic.AtomicInteger failed = new java.util.concurrent.atomic.AtomicInteger();
        for (int i = 0; i < n; i++) {
            slots.acquire();
            Message m = p.newMessageBuilder().setTopic(topic).setTag("bench").setBody(body).build();
            producer.sendAsync(m).whenComplete((receipt, e) -> {
                if (e != null && failed.getAndIncrement() < 5) System.err.println("bench: send failed: " + e);
                slots.release();
                done.countDown();
            });
        }
        done.await();
        return failed.get();
    }

    static int consume(String endpoint, String group, String topic, int count, int invisibleS, int batch, boolean async) throws Exception {
        ClientServiceProvider p = ClientServiceProvider.loadService();
        long cpu0 = cpuNs();
        SimpleConsumer c = simpleConsumer(p, endpoint, group, topic);
        Duration inv = Duration.ofSeconds(invisibleS);
        int acked = 0, ackFailed = 0, receiveFailed = 0;
        long t0 = System.nanoTime(), end = t0;
        while (acked < count && System.nanoTime() - t0 < CONSUME_LIMIT_NS) {
            List<MessageView> ms;
            try {
                ms = c.receive(batch, inv);
            } catch (Exception e) {
                if (receiveFailed++ < 5) System.err.println("bench: receive failed: " + e);
                Thread.sleep(100);   // do not spin if the proxy is gone
                continue;
            }
            if (async) {
                List<CompletableFuture<Void>> fs = new ArrayList<>(ms.size());
                for (MessageView m : ms) fs.add(c.ackAsync(m));
                for (CompletableFuture<Void> f : fs) {
                    try {
                        f.get(10, TimeUnit.SECONDS);
                        acked++;
                    } catch (Exception e) {
                        if (ackFailed++ < 5) System.err.println("bench: ack failed: " + e);
                    }
                }
            } else {
                for (MessageView m : ms) {
                    try {
                        c.ack(m);
                        acked++;
                    } catch (Exception e) {
                        if (ackFailed++ < 5) System.err.println("bench: ack failed: " + e);
                    }
                }
            }
            end = System.nanoTime();
        }
        double secs = (end - t0) / 1e9;
        long rss = peakRssKb();
        long cpu = cpuNs() - cpu0;
        emit(String.format(Locale.ROOT, "{\"mode\":\"consume\",\"count\":%d,\"seconds\":%.3f,\"msgs_per_s\":%.1f,\"cpu_s_per_10k\":%.3f,\"rss_kb\":%d}",
            acked, secs, secs > 0 ? acked / secs : 0.0, cpu / 1e9 * 10000.0 / Math.max(acked, 1), rss));
        if (ackFailed > 0 || receiveFailed > 0)
            System.err.println("bench: " + ackFailed + " acks and " + receiveFailed + " receives failed");
        if (acked < count) System.err.println("bench: only " + acked + " of " + count + " messages acked within 120 s");
        closeQuietly(c);
        return acked >= count && ackFailed == 0 ? 0 : 3;
    }

    // One held message: its view (the client updates the receipt handle inside it after each
    // successful changeInvisibleDuration) and its next due time.
    static final class Held implements Delayed {
        final MessageView view;
        long due;   // System.nanoTime() scale
        Held(MessageView view, long due) { this.view = view; this.due = due; }
        @Override public long getDelay(TimeUnit unit) { return unit.convert(due - System.nanoTime(), TimeUnit.NANOSECONDS); }
        @Override public int compareTo(Delayed o) { return Long.compare(due, ((Held) o).due); }
    }

    static int hold(String endpoint, String group, String topic, int count, int invisibleS, int holdS) throws Exception {
        ClientServiceProvider p = ClientServiceProvider.loadService();
        long cpu0 = cpuNs();
        SimpleConsumer c = simpleConsumer(p, endpoint, group, topic);
        Duration inv = Duration.ofSeconds(invisibleS);
        long period = TimeUnit.SECONDS.toNanos(invisibleS) / 3;

        DelayQueue<Held> queue = new DelayQueue<>();
        List<Held> all = new ArrayList<>(count);
        // [0] per-call latency, [1] lateness, both ns; grown and written only by the renewer
        // thread, read after it is joined.
        long[][] rec = {new long[4096], new long[4096]};
        int[] n = new int[2];   // renewals, failures
        final boolean[] stop = {false};

        // The renewer: ONE thread, synchronous changeInvisibleDuration, fixed-rate schedule.
        Thread renewer = new Thread(() -> {
            while (true) {
                Held h;
                try {
                    h = queue.poll(20, TimeUnit.MILLISECONDS);
                } catch (InterruptedException e) {
                    return;
                }
                synchronized (stop) { if (stop[0]) return; }
                if (h == null) continue;
                long sent = System.nanoTime();
                boolean ok = true;
                try {
                    c.changeInvisibleDuration(h.view, inv);
                } catch (Exception e) {
                    ok = false;
                    if (n[1] < 5) System.err.println("bench: changeInvisibleDuration failed: " + e);
                }
                long done = System.nanoTime();
                int i = n[0]++;
                if (i == rec[0].length) {
                    rec[0] = Arrays.copyOf(rec[0], 2 * i);
                    rec[1] = Arrays.copyOf(rec[1], 2 * i);
                }
                rec[0][i] = done - sent;
                rec[1][i] = Math.max(0, sent - h.due);
                if (!ok) n[1]++;
                h.due += period;
                queue.put(h);
            }
        }, "bench-renewer");
        renewer.setDaemon(true);

        fill(c, count, inv, period, all, queue, renewer, HOLD_RECEIVE_LIMIT_NS);

        // Hold for HOLD_S seconds after the last message arrived, then stop the renewer.
        long holdEnd = System.nanoTime() + TimeUnit.SECONDS.toNanos(holdS);
        long left;
        while ((left = holdEnd - System.nanoTime()) > 0) TimeUnit.NANOSECONDS.sleep(left);
        synchronized (stop) { stop[0] = true; }
        renewer.join(TimeUnit.SECONDS.toMillis(10));   // at most one call (<= 3 s) in flight
        if (renewer.isAlive()) die(1, "the renewer thread did not stop");

        // Ack all (async, all in flight together; same as consume's default).
        List<CompletableFuture<Void>> fs = new ArrayList<>(all.size());
        for (Held h : all) fs.add(c.ackAsync(h.view));
        int ackFailed = 0;
        for (CompletableFuture<Void> f : fs) {
            try {
                f.get(10, TimeUnit.SECONDS);
            } catch (Exception e) {
                if (ackFailed++ < 5) System.err.println("bench: ack failed: " + e);
            }
        }

        int renewals = n[0], fails = n[1];
        long rss = peakRssKb();
        emit(String.format(Locale.ROOT,
            "{\"mode\":\"hold\",\"count\":%d,\"renewals\":%d,\"renew_fail\":%d,\"renew_p50_ms\":%.3f,\"renew_p99_ms\":%.3f,\"lateness_p99_ms\":%.3f,\"rss_kb\":%d}",
            all.size(), renewals, fails,
            pctMs(rec[0], renewals, 50), pctMs(rec[0], renewals, 99), pctMs(rec[1], renewals, 99), rss));
        System.err.println(String.format(Locale.ROOT,
            "bench: hold detail: renew ms p90 %.3f p99.9 %.3f max %.3f; lateness ms p50 %.3f max %.3f; period %.3f s",
            pctMs(rec[0], renewals, 90), pctMs(rec[0], renewals, 99.9), pctMs(rec[0], renewals, 100),
            pctMs(rec[1], renewals, 50), pctMs(rec[1], renewals, 100), period / 1e9));
        if (ackFailed > 0) System.err.println("bench: " + ackFailed + " of " + all.size() + " final acks failed (lease lost?)");
        closeQuietly(c);
        return all.size() == count && fails == 0 && ackFailed == 0 ? 0 : 3;
    }

    // Receives up to count messages (batches of HOLD_BATCH, invisible inv) into all and the
    // renewal queue, each due a period after it arrived, starting the renewer at the first;
    // gives up after limitNs. The number of failed receives.
    static int fill(SimpleConsumer c, int count, Duration inv, long period, List<Held> all,
                    DelayQueue<Held> queue, Thread renewer, long limitNs) throws InterruptedException {
        int receiveFailed = 0;
        long t0 = System.nanoTime();
        while (all.size() < count && System.nanoTime() - t0 < limitNs) {
            List<MessageView> ms;
            try {
                ms = c.receive(Math.min(HOLD_BATCH, count - all.size()), inv);
            } catch (Exception e) {
                if (receiveFailed++ < 5) System.err.println("bench: receive failed: " + e);
                Thread.sleep(100);   // do not spin if the proxy is gone
                continue;
            }
            long now = System.nanoTime();
            for (MessageView m : ms) {
                Held h = new Held(m, now + period);
                all.add(h);
                queue.put(h);
            }
            if (!ms.isEmpty() && !renewer.isAlive()) renewer.start();
        }
        if (all.size() < count)
            System.err.println("bench: only " + all.size() + " of " + count + " messages received within "
                + TimeUnit.NANOSECONDS.toSeconds(limitNs) + " s");
        return receiveFailed;
    }

    static int leases(String endpoint, String group, String topic, int count, int invisibleS, int holdS,
                      int inflight) throws Exception {
        ClientServiceProvider p = ClientServiceProvider.loadService();
        SimpleConsumer c = simpleConsumer(p, endpoint, group, topic);
        Duration inv = Duration.ofSeconds(invisibleS);
        long period = TimeUnit.SECONDS.toNanos(invisibleS) / 3;
        long brokerPid = envLong("BENCH_BROKER_PID");
        DelayQueue<Held> queue = new DelayQueue<>();
        List<Held> all = new ArrayList<>(count);
        java.util.concurrent.Semaphore slots = new java.util.concurrent.Semaphore(inflight);
        java.util.concurrent.atomic.AtomicLong answered = new java.util.concurrent.atomic.AtomicLong();
        java.util.concurrent.atomic.AtomicLong failed = new java.util.concurrent.atomic.AtomicLong();
        // lateness (ns) of the renewals sent in the window; written by the renewer thread only
        long[][] late = {new long[4096]};
        int[] nLate = {0};
        final boolean[] state = {false, false};   // [0] stop, [1] measuring

        Thread renewer = new Thread(() -> {
            while (true) {
                Held h;
                try {
                    h = queue.poll(20, TimeUnit.MILLISECONDS);
                    synchronized (state) { if (state[0]) return; }
                    if (h == null) continue;
                    slots.acquire();
                } catch (InterruptedException e) {
                    return;
                }
                long sent = System.nanoTime();
                boolean measuring;
                synchronized (state) { measuring = state[1]; }
                if (measuring) {
                    if (nLate[0] == late[0].length) late[0] = Arrays.copyOf(late[0], 2 * nLate[0]);
                    late[0][nLate[0]++] = Math.max(0, sent - h.due);
                }
                c.changeInvisibleDurationAsync(h.view, inv).whenComplete((v, e) -> {
                    slots.release();
                    if (e != null) {
                        if (failed.getAndIncrement() < 5) System.err.println("bench: changeInvisibleDurationAsync failed: " + e);
                    }
                    answered.incrementAndGet();
                    h.due += period;
                    queue.put(h);
                });
            }
        }, "bench-renewer");
        renewer.setDaemon(true);

        long rss0 = rssKb();
        long t0 = System.nanoTime();
        fill(c, count, inv, period, all, queue, renewer, TimeUnit.SECONDS.toNanos(300));
        double fillS = (System.nanoTime() - t0) / 1e9;
        long rssFull = rssKb();

        // A lease renews at its receipt + k periods, so the renewals of a fast fill come in
        // bursts; a window opened half a period off them (1.5 periods after the fill) and
        // HOLD_S long (two periods, as the mqlease rows) holds two renewals of every lease.
        TimeUnit.NANOSECONDS.sleep(period + period / 2);
        long cpu0 = cpuNs(), b0 = ticks(brokerPid), a0 = answered.get(), w0 = System.nanoTime();
        synchronized (state) { state[1] = true; }
        TimeUnit.SECONDS.sleep(holdS);
        synchronized (state) { state[1] = false; }
        long cpu1 = cpuNs(), b1 = ticks(brokerPid), a1 = answered.get(), w1 = System.nanoTime();
        synchronized (state) { state[0] = true; }
        renewer.join(TimeUnit.SECONDS.toMillis(10));
        slots.acquire(inflight);   // the renewals in flight have answered

        List<CompletableFuture<Void>> fs = new ArrayList<>(all.size());
        int ackFailed = 0;
        for (Held h : all) {
            fs.add(c.ackAsync(h.view));
            if (fs.size() == inflight) ackFailed += waitAll(fs);
        }
        ackFailed += waitAll(fs);

        long renewals = a1 - a0;
        double windowS = (w1 - w0) / 1e9;
        emit(String.format(Locale.ROOT,
            "{\"mode\":\"leases\",\"count\":%d,\"fill_s\":%.3f,\"renewals_per_s\":%.1f,\"renew_fail\":%d,"
                + "\"cpu_us_per_renewal\":%.2f,\"broker_cpu_us_per_renewal\":%.2f,\"lateness_p99_ms\":%.3f,"
                + "\"bytes_per_lease\":%.0f,\"ack_failed\":%d,\"rss_kb\":%d}",
            all.size(), fillS, renewals / windowS, failed.get(),
            renewals > 0 ? (cpu1 - cpu0) / 1e3 / renewals : 0.0,
            renewals > 0 && brokerPid > 0 ? (b1 - b0) * 1e4 / renewals : 0.0,
            pctMs(late[0], nLate[0], 99), (rssFull - rss0) * 1024.0 / Math.max(1, all.size()), ackFailed, rssFull));
        closeQuietly(c);
        return all.size() == count && failed.get() == 0 && ackFailed == 0 ? 0 : 3;
    }

    // Waits for every future of fs (10 s each), clears it; the number that failed.
    static int waitAll(List<CompletableFuture<Void>> fs) {
        int bad = 0;
        for (CompletableFuture<Void> f : fs) {
            try {
                f.get(10, TimeUnit.SECONDS);
            } catch (Exception e) {
                if (bad++ < 5) System.err.println("bench: ack failed: " + e);
            }
        }
        fs.clear();
        return bad;
    }

    static int drain(String endpoint, String group, String topic, String goFile, int idleS) throws Exception {
        ClientServiceProvider p = ClientServiceProvider.loadService();
        SimpleConsumer c = p.newSimpleConsumerBuilder()
            .setClientConfiguration(config(endpoint))
            .setConsumerGroup(group)
            .setSubscriptionExpressions(Map.of(topic, new FilterExpression("*", FilterExpressionType.TAG)))
            .setAwaitDuration(Duration.ofSeconds(1))
            .build();
        while (!Files.exists(Path.of(goFile))) Thread.sleep(5);
        long cpu0 = cpuNs(), t0 = System.nanoTime(), last = t0;
        Duration inv = Duration.ofSeconds(30);
        List<CompletableFuture<Void>> fs = new ArrayList<>(DRAIN_BATCH);
        long acked = 0;
        int failed = 0;
        while (System.nanoTime() - last < TimeUnit.SECONDS.toNanos(idleS)
               && System.nanoTime() - t0 < TimeUnit.SECONDS.toNanos(300)) {
            List<MessageView> ms;
            try {
                ms = c.receive(DRAIN_BATCH, inv);
            } catch (Exception e) {
                if (failed++ < 5) System.err.println("bench: receive failed: " + e);
                Thread.sleep(100);
                continue;
            }
            if (ms.isEmpty()) continue;
            for (MessageView m : ms) fs.add(c.ackAsync(m));
            int bad = waitAll(fs);
            failed += bad;
            acked += ms.size() - bad;
            last = System.nanoTime();
        }
        long cpu = cpuNs() - cpu0;
        // start and last on CLOCK_MONOTONIC (System.nanoTime on Linux), as bench/workers.lua's
        emit(String.format(Locale.ROOT, "{\"acked\":%d,\"start\":%.6f,\"last\":%.6f,\"cpu_s\":%.3f,\"failed\":%d,"
            + "\"rss_kb\":%d}", acked, t0 / 1e9, last / 1e9, cpu / 1e9, failed, peakRssKb()));
        closeQuietly(c);
        return failed == 0 ? 0 : 3;
    }

    static long envLong(String name) {
        String v = System.getenv(name);
        try {
            return v == null || v.isEmpty() ? -1 : Long.parseLong(v);
        } catch (NumberFormatException e) {
            return -1;
        }
    }

    // utime + stime of process pid in clock ticks (10 ms), or 0.
    static long ticks(long pid) {
        if (pid <= 0) return 0;
        try {
            String stat = Files.readString(Path.of("/proc/" + pid + "/stat"));
            String[] f = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
            return Long.parseLong(f[11]) + Long.parseLong(f[12]);   // fields 14 and 15
        } catch (IOException | RuntimeException e) {
            return 0;
        }
    }

    static long rssKb() { return statusKb("VmRSS"); }

    static long cpuNs() {
        java.lang.management.OperatingSystemMXBean os = java.lang.management.ManagementFactory.getOperatingSystemMXBean();
        if (os instanceof com.sun.management.OperatingSystemMXBean)
            return ((com.sun.management.OperatingSystemMXBean) os).getProcessCpuTime();
        return -1;
    }

    static int push(String endpoint, String group, String topic, int count) throws Exception {
        ClientServiceProvider p = ClientServiceProvider.loadService();
        java.util.concurrent.atomic.AtomicInteger consumed = new java.util.concurrent.atomic.AtomicInteger();
        java.util.concurrent.CountDownLatch done = new java.util.concurrent.CountDownLatch(1);
        long cpu0 = cpuNs(), t0 = System.nanoTime();
        org.apache.rocketmq.client.apis.consumer.PushConsumer c = p.newPushConsumerBuilder()
            .setClientConfiguration(config(endpoint))
            .setConsumerGroup(group)
            .setSubscriptionExpressions(Map.of(topic, new FilterExpression("*", FilterExpressionType.TAG)))
            .setMessageListener(m -> {
                if (consumed.incrementAndGet() >= count) done.countDown();
                return org.apache.rocketmq.client.apis.consumer.ConsumeResult.SUCCESS;
            })
            .build();
        done.await(120, TimeUnit.SECONDS);
        double secs = (System.nanoTime() - t0) / 1e9;
        long cpu = cpuNs() - cpu0;
        int n = Math.min(consumed.get(), count);
        long rss = peakRssKb();
        emit(String.format(Locale.ROOT, "{\"mode\":\"push\",\"count\":%d,\"seconds\":%.3f,\"msgs_per_s\":%.1f,\"cpu_s_per_10k\":%.3f,\"rss_kb\":%d}",
            n, secs, n / secs, cpu / 1e9 * 10000.0 / Math.max(n, 1), rss));
        closeQuietly(c);
        return n >= count ? 0 : 3;
    }

    // ---------------------------------------------------------------------------------------

    // Nearest-rank percentile of the first n values, in ms.
    static double pctMs(long[] v, int n, double pct) {
        if (n == 0) return 0;
        long[] s = Arrays.copyOf(v, n);
        Arrays.sort(s);
        int rank = (int) Math.ceil(pct / 100.0 * n);
        return s[Math.max(0, rank - 1)] / 1e6;
    }

    static long peakRssKb() { return statusKb("VmHWM"); }

    // A field of /proc/self/status in kB (VmRSS: resident now, VmHWM: its peak), or -1.
    static long statusKb(String field) {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
                if (line.startsWith(field + ":")) return Long.parseLong(line.replaceAll("[^0-9]", ""));
            }
        } catch (IOException | NumberFormatException e) {
            System.err.println("bench: cannot read " + field + ": " + e);
        }
        return -1;
    }

    static void emit(String line) {
        json.println(line);
        json.flush();
    }

    // close() of a client can wait on its executors; give it 5 s at most.
    static void closeQuietly(AutoCloseable c) {
        Thread t = new Thread(() -> {
            try {
                c.close();
            } catch (Exception e) {
                System.err.println("bench: close: " + e);
            }
        }, "bench-close");
        t.setDaemon(true);
        t.start();
        try {
            t.join(5000);
        } catch (InterruptedException ignored) {
        }
    }

    static void watchdog(long seconds) {
        Thread t = new Thread(() -> {
            try {
                Thread.sleep(TimeUnit.SECONDS.toMillis(seconds));
            } catch (InterruptedException e) {
                return;
            }
            System.err.println("bench: watchdog: still running after " + seconds + " s; giving up");
            Runtime.getRuntime().halt(4);
        }, "bench-watchdog");
        t.setDaemon(true);
        t.start();
    }

    static int posInt(String s, String what) {
        try {
            int v = Integer.parseInt(s);
            if (v > 0) return v;
        } catch (NumberFormatException ignored) {
        }
        die(2, what + " must be a positive integer, got '" + s + "'");
        return 0;
    }

    static void die(int rc, String msg) {
        System.err.println("bench: " + msg);
        Runtime.getRuntime().halt(rc);
    }

    static void usage() {
        die(2, "usage:\n"
            + "  Bench produce ENDPOINT TOPIC COUNT SIZE\n"
            + "  Bench sendasync ENDPOINT TOPIC COUNT SIZE INFLIGHT\n"
            + "  Bench consume ENDPOINT GROUP TOPIC COUNT INVISIBLE_S BATCH [sync|async]\n"
            + "  Bench push    ENDPOINT GROUP TOPIC COUNT\n"
            + "  Bench hold    ENDPOINT GROUP TOPIC COUNT INVISIBLE_S HOLD_S\n"
            + "  Bench leases  ENDPOINT GROUP TOPIC COUNT INVISIBLE_S HOLD_S INFLIGHT\n"
            + "  Bench drain   ENDPOINT GROUP TOPIC GO_FILE IDLE_S");
    }
}
