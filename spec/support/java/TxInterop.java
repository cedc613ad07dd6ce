// TxInterop.java -- the official Java 5.x client (rocketmq-client-java) as the peer of
// spec/integration/transaction_interop_spec.lua.
//
//   produce GRPC TOPIC
//       A transactional producer (ProducerBuilder.setTransactionChecker) sends three messages
//       in transactions it commits (bodies java-commit-1..3) and one it rolls back
//       (java-rollback); prints "sent <id> <body>" for each, then DONE.
//   consume GRPC TOPIC GROUP COUNT
//       A SimpleConsumer of GROUP polls once, prints READY, then "got <id> <type-less body>"
//       for each message it reads (acking it) until COUNT came or 60 s passed, then DONE.
//
// Run by spec/support/java-peer.sh tx with the single-file source launcher; nothing is built.
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.apis.producer.Transaction;
import org.apache.rocketmq.client.apis.producer.TransactionResolution;

public class TxInterop {
    static ClientConfiguration conf(String grpc) {
        return ClientConfiguration.newBuilder().setEndpoints(grpc).enableSsl(false)
            .setRequestTimeout(Duration.ofSeconds(10)).build();
    }

    static void produce(String grpc, String topic) throws Exception {
        ClientServiceProvider sp = ClientServiceProvider.loadService();
        // every check of ours is of a transaction already ended here: commit is what it was
        Producer p = sp.newProducerBuilder().setClientConfiguration(conf(grpc)).setTopics(topic)
            .setTransactionChecker(v -> TransactionResolution.COMMIT).build();
        List<String> bodies = List.of("java-commit-1", "java-commit-2", "java-commit-3", "java-rollback");
        for (String body : bodies) {
            Transaction tx = p.beginTransaction();
            Message m = sp.newMessageBuilder().setTopic(topic).setKeys(body)
                .setBody(body.getBytes(StandardCharsets.UTF_8)).build();
            SendReceipt r = p.send(m, tx);
            if (body.equals("java-rollback")) tx.rollback(); else tx.commit();
            System.out.println("sent " + r.getMessageId() + " " + body);
        }
        System.out.println("DONE");
        System.out.flush();
        p.close();
    }

    static void consume(String grpc, String topic, String group, int count) throws Exception {
        ClientServiceProvider sp = ClientServiceProvider.loadService();
        SimpleConsumer sc = sp.newSimpleConsumerBuilder().setClientConfiguration(conf(grpc))
            .setConsumerGroup(group).setAwaitDuration(Duration.ofSeconds(2))
            .setSubscriptionExpressions(Map.of(topic, new FilterExpression("*", FilterExpressionType.TAG))).build();
        sc.receive(1, Duration.ofSeconds(30));   // a new group starts where the queue is now
        System.out.println("READY");
        System.out.flush();
        long deadline = System.currentTimeMillis() + 60000;
        int got = 0;
        while (got < count && System.currentTimeMillis() < deadline) {
            for (MessageView v : sc.receive(16, Duration.ofSeconds(30))) {
                byte[] b = new byte[v.getBody().remaining()];
                v.getBody().get(b);
                sc.ack(v);
                got++;
                System.out.println("got " + v.getMessageId() + " " + new String(b, StandardCharsets.UTF_8));
                System.out.flush();
            }
        }
        System.out.println("DONE");
        System.out.flush();
        sc.close();
    }

    public static void main(String[] a) throws Exception {
        if (a.length == 3 && a[0].equals("produce")) {
            produce(a[1], a[2]);
        } else if (a.length == 5 && a[0].equals("consume")) {
            consume(a[1], a[2], a[3], Integer.parseInt(a[4]));
        } else {
            System.err.println("usage: TxInterop produce GRPC TOPIC | consume GRPC TOPIC GROUP COUNT");
            System.exit(2);
        }
        System.exit(0);
    }
}
