// Client52Interop.java -- the Java peer of spec/integration/java_client_interop_spec.lua: the
// official RocketMQ 5 Java client of today (rocketmq-client-java 5.2.0, apis 2.1.x) and nothing
// else on the classpath, in one JVM per direction.
//
//   produce GRPC PRIO_TOPIC DELAY_TOPIC FIFO_TOPIC
//       Sends 4 priority messages (priorities 0 3 1 2; PRIO_TOPIC "-": none, the server has no
//       PRIORITY topics), 2 delay messages (due 3 s and 4 s from now) and 5 FIFO messages of
//       the message group "java-order" in order. One JSON line per message says what was sent.
//   consume GRPC GROUP ORDERLY_GROUP PRIO_TOPIC DELAY_TOPIC FIFO_TOPIC COUNT
//       A SimpleConsumer of GROUP on the priority and delay topics and one of ORDERLY_GROUP on
//       the FIFO topic poll once, print READY, then print one JSON line per message they read
//       (acked, in the order read) until COUNT came or 90 s passed, and DONE.
//
// Run by spec/support/java-peer.sh client52 with the single-file source launcher; nothing is built.
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.*;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageBuilder;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;

public class Client52Interop {
    static String md5(byte[] b) throws Exception {
        StringBuilder sb = new StringBuilder();
        for (byte x : MessageDigest.getInstance("MD5").digest(b)) sb.append(String.format("%02x", x));
        return sb.toString();
    }

    static String q(String s) {
        if (s == null) return "null";
        StringBuilder sb = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') sb.append('\\').append(c);
            else if (c < 0x20 || c > 0x7e) sb.append(String.format("\\u%04x", (int) c));
            else sb.append(c);
        }
        return sb.append('"').toString();
    }

    static String json(String id, String topic, String tag, Collection<String> keys, Map<String, String> props,
                       String group, Long deliveryMs, Integer priority, int attempt, byte[] body) throws Exception {
        StringBuilder sb = new StringBuilder("{");
        sb.append("\"id\":").append(q(id)).append(",\"topic\":").append(q(topic));
        sb.append(",\"tag\":").append(q(tag)).append(",\"keys\":[");
        int i = 0;
        for (String k : new TreeSet<>(keys)) sb.append(i++ > 0 ? "," : "").append(q(k));
        sb.append("],\"properties\":{");
        i = 0;
        for (Map.Entry<String, String> e : new TreeMap<>(props).entrySet())
            sb.append(i++ > 0 ? "," : "").append(q(e.getKey())).append(':').append(q(e.getValue()));
        sb.append("},\"message_group\":").append(q(group));
        sb.append(",\"delivery_ms\":").append(deliveryMs == null ? "null" : deliveryMs.toString());
        sb.append(",\"priority\":").append(priority == null ? "null" : priority.toString());
        sb.append(",\"attempt\":").append(attempt);
        sb.append(",\"body\":").append(q(new String(body, StandardCharsets.UTF_8)));
        sb.append(",\"md5\":").append(q(md5(body))).append('}');
        return sb.toString();
    }

    static ClientConfiguration config(String grpc) {
        return ClientConfiguration.newBuilder().setEndpoints(grpc).enableSsl(false)
            .setRequestTimeout(Duration.ofSeconds(15)).build();
    }

    static void send(ClientServiceProvider sp, Producer p, String topic, String kase, String group, Long deliverMs,
                     Integer priority) throws Exception {
        byte[] b = ("java52 " + kase + " – Zürich").getBytes(StandardCharsets.UTF_8);
        String[] keys = {"key-" + kase, "java52"};
        Map<String, String> props = Map.of("case", kase, "city", "東京");
        MessageBuilder mb = sp.newMessageBuilder().setTopic(topic).setTag("Tag" + kase).setKeys(keys).setBody(b);
        for (Map.Entry<String, String> e : props.entrySet()) mb.addProperty(e.getKey(), e.getValue());
        if (group != null) mb.setMessageGroup(group);
        if (deliverMs != null) mb.setDeliveryTimestamp(deliverMs);
        if (priority != null) mb.setPriority(priority);
        SendReceipt r = p.send(mb.build());
        System.out.println(json(r.getMessageId().toString(), topic, "Tag" + kase, Arrays.asList(keys), props, group,
            deliverMs, priority, 0, b));
    }

    static void produce(String grpc, String prio, String delay, String fifo) throws Exception {
        ClientServiceProvider sp = ClientServiceProvider.loadService();
        List<String> topics = new ArrayList<>(List.of(delay, fifo));
        if (!prio.equals("-")) topics.add(prio);
        try (Producer p = sp.newProducerBuilder().setClientConfiguration(config(grpc))
                .setTopics(topics.toArray(new String[0])).build()) {
            if (!prio.equals("-")) for (int pr : new int[]{0, 3, 1, 2}) send(sp, p, prio, "prio" + pr, null, null, pr);
            long now = System.currentTimeMillis();
            send(sp, p, delay, "delay3", null, now + 3000, null);
            send(sp, p, delay, "delay4", null, now + 4000, null);
            for (int i = 1; i <= 5; i++) send(sp, p, fifo, "fifo" + i, "java-order", null, null);
        }
    }

    static SimpleConsumer consumer(ClientServiceProvider sp, String grpc, String group, List<String> topics)
        throws Exception {
        Map<String, FilterExpression> subs = new HashMap<>();
        for (String t : topics) subs.put(t, new FilterExpression("*", FilterExpressionType.TAG));
        SimpleConsumer c = sp.newSimpleConsumerBuilder().setClientConfiguration(config(grpc)).setConsumerGroup(group)
            .setAwaitDuration(Duration.ofSeconds(2)).setSubscriptionExpressions(subs).build();
        c.receive(1, Duration.ofSeconds(30));   // a new group starts where the queue is now
        return c;
    }

    static int drain(SimpleConsumer c) throws Exception {
        int n = 0;
        for (MessageView v : c.receive(16, Duration.ofSeconds(30))) {
            byte[] b = new byte[v.getBody().remaining()];
            v.getBody().get(b);
            c.ack(v);
            n++;
            System.out.println(json(v.getMessageId().toString(), v.getTopic(), v.getTag().orElse(null), v.getKeys(),
                v.getProperties(), v.getMessageGroup().orElse(null), v.getDeliveryTimestamp().orElse(null),
                v.getPriority().orElse(null), v.getDeliveryAttempt(), b));
        }
        return n;
    }

    static void consume(String grpc, String group, String orderly, String prio, String delay, String fifo, int count)
        throws Exception {
        ClientServiceProvider sp = ClientServiceProvider.loadService();
        List<String> topics = new ArrayList<>(List.of(delay));
        if (!prio.equals("-")) topics.add(prio);
        SimpleConsumer plain = consumer(sp, grpc, group, topics);
        SimpleConsumer ordered = consumer(sp, grpc, orderly, List.of(fifo));
        System.out.println("READY");
        System.out.flush();
        long deadline = System.currentTimeMillis() + 90000;
        int got = 0;
        while (got < count && System.currentTimeMillis() < deadline) {
            got += drain(plain);
            got += drain(ordered);
        }
        System.out.println("DONE");
        System.out.flush();
        plain.close();
        ordered.close();
    }

    public static void main(String[] a) throws Exception {
        if (a.length == 5 && a[0].equals("produce")) {
            produce(a[1], a[2], a[3], a[4]);
        } else if (a.length == 8 && a[0].equals("consume")) {
            consume(a[1], a[2], a[3], a[4], a[5], a[6], Integer.parseInt(a[7]));
        } else {
            System.err.println("usage: Client52Interop produce GRPC PRIO DELAY FIFO | consume GRPC GROUP ORDERLY PRIO DELAY FIFO COUNT");
            System.exit(2);
        }
        System.out.flush();
        System.exit(0);
    }
}
