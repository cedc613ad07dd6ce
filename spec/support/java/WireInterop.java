// WireInterop.java -- the Java peers of spec/wire_spec.lua, in one JVM per direction.
//
//   produce NAMESRV GRPC RUN TOPIC FIFO_TOPIC DELAY_TOPIC
//       A remoting producer (org.apache.rocketmq:rocketmq-client, DefaultMQProducer: the 4.x
//       programming model) and then the official 5.x client (rocketmq-client-java) each send
//       every case below. One JSON line per message says what was sent: id, topic, tag, keys,
//       user properties, message group, delivery time, body length and MD5 of the body; the
//       remoting producer also gives each message a trace context (the property TRACE_CONTEXT,
//       MessageConst.PROPERTY_TRACE_CONTEXT; the 5.x Java MessageBuilder has no setter for it).
//   consume NAMESRV GRPC RUN TOPIC COUNT
//       Starts a remoting push consumer and a 5.x SimpleConsumer (own groups), polls once,
//       prints READY, then prints one JSON line per message each of them reads (COUNT each,
//       or until 90 s pass) and DONE.
//
// Run by spec/support/java-peer.sh wire with the single-file source launcher; nothing is built.
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageBuilder;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;

public class WireInterop {
    // Properties with non-ASCII values (and a space, a quote, a backslash) every message carries.
    static Map<String, String> props(String client, String kase) {
        Map<String, String> p = new LinkedHashMap<>();
        p.put("case", client + "/" + kase);
        p.put("city", "Zürich – 東京 \"quoted\" back\\slash");
        p.put("emoji", "🚀");
        return p;
    }

    static byte[] body(String kase) {
        switch (kase) {
            case "small": return "hello from java".getBytes(StandardCharsets.UTF_8);
            case "compressible": {
                StringBuilder sb = new StringBuilder();
                while (sb.length() < 10240) sb.append("the quick brown fox jumps over the lazy dog ");
                return sb.substring(0, 10240).getBytes(StandardCharsets.UTF_8);
            }
            case "random1m": return random(1 << 20, 1);
            case "random3_9m": return random(3900 * 1024, 2);
            default: return ("body of " + kase).getBytes(StandardCharsets.UTF_8);
        }
    }

    static byte[] random(int n, long seed) {
        byte[] b = new byte[n];
        new Random(seed).nextBytes(b);
        return b;
    }

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

    static String json(String client, String kase, String id, String topic, String tag, Collection<String> keys,
                       Map<String, String> props, String group, Long deliveryMs, byte[] body) throws Exception {
        StringBuilder sb = new StringBuilder("{");
        sb.append("\"client\":").append(q(client)).append(",\"case\":").append(q(kase));
        sb.append(",\"id\":").append(q(id)).append(",\"topic\":").append(q(topic));
        sb.append(",\"tag\":").append(q(tag)).append(",\"keys\":[");
        int i = 0;
        for (String k : keys) sb.append(i++ > 0 ? "," : "").append(q(k));
        sb.append("],\"properties\":{");
        i = 0;
        for (Map.Entry<String, String> e : props.entrySet())
            sb.append(i++ > 0 ? "," : "").append(q(e.getKey())).append(':').append(q(e.getValue()));
        sb.append("},\"message_group\":").append(q(group));
        sb.append(",\"delivery_ms\":").append(deliveryMs == null ? "null" : deliveryMs.toString());
        sb.append(",\"length\":").append(body.length).append(",\"md5\":").append(q(md5(body))).append('}');
        return sb.toString();
    }

    // A W3C traceparent of its own for each remoting case: 00-<md5 of the case>-<its first 16 hex>-01.
    static String traceparent(String kase) throws Exception {
        String h = md5(("remoting/" + kase).getBytes(StandardCharsets.UTF_8));
        return "00-" + h + "-" + h.substring(0, 16) + "-01";
    }

    // A JSON object from json() with a "trace_context" field added.
    static String withTrace(String json, String traceContext) {
        return json.substring(0, json.length() - 1) + ",\"trace_context\":" + q(traceContext) + "}";
    }

    static final String[] PLAIN = {"small", "compressible", "random1m", "random3_9m"};

    // ------------------------------------------------------------------ produce

    static void produceRemoting(String ns, String run, String topic, String fifo, String delay) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer("wire_pg_" + run);
        p.setNamesrvAddr(ns);
        p.setSendMsgTimeout(15000);
        p.setMaxMessageSize(8 << 20);
        p.start();
        try {
            for (String kase : PLAIN) send(p, kase, topic, null, null);
            send(p, "fifo", fifo, "order-42", null);
            send(p, "delay", delay, null, System.currentTimeMillis() + 3000);
        } finally {
            p.shutdown();
        }
    }

    static void send(DefaultMQProducer p, String kase, String topic, String group, Long deliverMs) throws Exception {
        byte[] b = body(kase);
        List<String> keys = Arrays.asList("key-" + kase, "k2", "remoting");
        Message m = new Message(topic, "Tag" + kase, String.join(" ", keys), b);
        Map<String, String> props = props("remoting", kase);
        for (Map.Entry<String, String> e : props.entrySet()) m.putUserProperty(e.getKey(), e.getValue());
        String tp = traceparent(kase);
        MessageAccessor.putProperty(m, MessageConst.PROPERTY_TRACE_CONTEXT, tp);
        SendResult r;
        if (group != null) {
            // what the 5.x proxy reads as message_group: the sharding key; one queue per group
            MessageAccessor.putProperty(m, MessageConst.PROPERTY_SHARDING_KEY, group);
            r = p.send(m, (mqs, msg, arg) -> mqs.get(Math.abs(arg.hashCode()) % mqs.size()), group);
        } else {
            if (deliverMs != null) m.setDeliverTimeMs(deliverMs);
            r = p.send(m);
        }
        System.out.println(withTrace(json("remoting", kase, r.getMsgId(), topic, "Tag" + kase, keys, props, group,
            deliverMs, b), tp));
    }

    static void produceGrpc(String grpc, String topic, String fifo, String delay) throws Exception {
        ClientServiceProvider sp = ClientServiceProvider.loadService();
        ClientConfiguration cc = ClientConfiguration.newBuilder().setEndpoints(grpc).enableSsl(false)
            .setRequestTimeout(Duration.ofSeconds(15)).build();
        try (Producer p = sp.newProducerBuilder().setClientConfiguration(cc).setTopics(topic, fifo, delay).build()) {
            for (String kase : PLAIN) send5(sp, p, kase, topic, null, null);
            send5(sp, p, "fifo", fifo, "order-42", null);
            send5(sp, p, "delay", delay, null, System.currentTimeMillis() + 3000);
        }
    }

    static void send5(ClientServiceProvider sp, Producer p, String kase, String topic, String group, Long deliverMs)
        throws Exception {
        byte[] b = body(kase);
        List<String> keys = Arrays.asList("key-" + kase, "k2", "java5");
        Map<String, String> props = props("java5", kase);
        MessageBuilder mb = sp.newMessageBuilder().setTopic(topic).setTag("Tag" + kase)
            .setKeys(keys.toArray(new String[0])).setBody(b);
        for (Map.Entry<String, String> e : props.entrySet()) mb.addProperty(e.getKey(), e.getValue());
        if (group != null) mb.setMessageGroup(group);
        if (deliverMs != null) mb.setDeliveryTimestamp(deliverMs);
        SendReceipt r = p.send(mb.build());
        System.out.println(json("java5", kase, r.getMessageId().toString(), topic, "Tag" + kase, keys, props, group,
            deliverMs, b));
    }

    // ------------------------------------------------------------------ consume

    static Map<String, String> userProps(Map<String, String> all) {
        Map<String, String> p = new TreeMap<>();
        for (Map.Entry<String, String> e : all.entrySet())
            if (!MessageConst.STRING_HASH_SET.contains(e.getKey())) p.put(e.getKey(), e.getValue());
        return p;
    }

    static void consume(String ns, String grpc, String run, String topic, int count) throws Exception {
        BlockingQueue<String> out = new LinkedBlockingQueue<>();
        Set<String> seenRemoting = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer rc = new DefaultMQPushConsumer("wire_rc_" + run);
        rc.setNamesrvAddr(ns);
        rc.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        rc.subscribe(topic, "*");
        rc.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                try {
                    if (!seenRemoting.add(m.getMsgId())) continue;
                    List<String> keys = m.getKeys() == null ? List.of() : Arrays.asList(m.getKeys().split(" "));
                    out.add(json("remoting", null, m.getMsgId(), m.getTopic(), m.getTags(), keys,
                        userProps(m.getProperties()), null, null, m.getBody()));
                } catch (Exception e) {
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });

        ClientServiceProvider sp = ClientServiceProvider.loadService();
        ClientConfiguration cc = ClientConfiguration.newBuilder().setEndpoints(grpc).enableSsl(false)
            .setRequestTimeout(Duration.ofSeconds(10)).build();
        SimpleConsumer sc = sp.newSimpleConsumerBuilder().setClientConfiguration(cc)
            .setConsumerGroup("wire_sc_" + run).setAwaitDuration(Duration.ofSeconds(2))
            .setSubscriptionExpressions(Map.of(topic, new FilterExpression("*", FilterExpressionType.TAG))).build();
        sc.receive(1, Duration.ofSeconds(30));   // a new group starts where the queue is now
        rc.start();
        System.out.println("READY");
        System.out.flush();

        long deadline = System.currentTimeMillis() + 90000;
        int got5 = 0, gotRemoting = 0;
        Set<String> seen5 = new HashSet<>();
        while ((got5 < count || gotRemoting < count) && System.currentTimeMillis() < deadline) {
            if (got5 < count) {
                for (MessageView v : sc.receive(16, Duration.ofSeconds(30))) {
                    byte[] b = new byte[v.getBody().remaining()];
                    v.getBody().get(b);
                    sc.ack(v);
                    if (!seen5.add(v.getMessageId().toString())) continue;
                    got5++;
                    System.out.println(json("java5", null, v.getMessageId().toString(), v.getTopic(),
                        v.getTag().orElse(null), v.getKeys(), new TreeMap<>(v.getProperties()), null, null, b));
                }
            } else {
                Thread.sleep(200);
            }
            String line;
            while ((line = out.poll()) != null) {
                gotRemoting++;
                System.out.println(line);
            }
        }
        System.out.println("DONE");
        System.out.flush();
        sc.close();
        rc.shutdown();
    }

    public static void main(String[] a) throws Exception {
        if (a.length >= 6 && a[0].equals("produce")) {
            produceRemoting(a[1], a[3], a[4], a[5], a[6]);
            produceGrpc(a[2], a[4], a[5], a[6]);
        } else if (a.length == 6 && a[0].equals("consume")) {
            consume(a[1], a[2], a[3], a[4], Integer.parseInt(a[5]));
        } else {
            System.err.println("usage: WireInterop produce NAMESRV GRPC RUN TOPIC FIFO DELAY | consume NAMESRV GRPC RUN TOPIC COUNT");
            System.exit(2);
        }
        System.out.flush();
        System.exit(0);
    }
}
