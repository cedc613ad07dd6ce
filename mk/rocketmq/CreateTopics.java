// Creates RocketMQ topics and consumer groups in one short-lived JVM (one `mqadmin` JVM per
// topic costs seconds each). Run by mk/rocketmq.sh with the single-file source
// launcher (Java 11+), the server jars on the classpath:
//
//   java -cp '<lib>/*' CreateTopics.java <namesrv host:port> <broker host:port[,host:port...]> ARG...
//
// Several brokers (a cluster of them, e.g. broker-a and broker-b): every topic gets its queues on
// EACH broker (as `mqadmin updateTopic -c Cluster` does: one createAndUpdateTopicConfig per
// master), every group is created on each, and a topic counts as routable once namesrv's route
// lists queues of all of them.
//
// ARG: NAME[:TYPE]          topic, 4 read / 4 write queues, TYPE = NORMAL (default) | FIFO |
//                           DELAY | TRANSACTION | PRIORITY (5.4+: TopicMessageType.PRIORITY; a
//                           message of priority n goes to queue min(n, 3), and a pop reads
//                           queue 3 first) (the gRPC proxy rejects messages of another type)
//      --group NAME         consumer group
//      --orderly-group NAME consumer group with consumeMessageOrderly (FIFO delivery)
//      --group-if-absent NAME  consumer group, unless the broker has one of that name
//                           already (which it keeps as it is, e.g. orderly)
//      --lite-group NAME:PARENT  5.5+: consumer group bound to the LITE topic PARENT
//                           (SubscriptionGroupAttributes "lite.bind.topic"): the proxy's
//                           ClientProcessor.validateLiteMode refuses a lite consumer without it
//      --broker-config KEY=VALUE  set a BrokerConfig key at run time (updateBrokerConfig, as
//                           `mqadmin updateBrokerConfig` does)
// With no ARG it only makes sure the broker is registered with the name server (used by
// `rocketmq.sh start`).
//
// Prints one line per item on stdout; exits 1 if anything failed.
//
// Why the registration step: the gRPC proxy never auto-creates topics and resolves every
// route through the name server. A 5.2.0 broker started inside the proxy first registers
// ~10 s after startup (its startup registration finds no name server connected yet), and
// until then the name server rejects the per-topic registration that topic creation sends,
// so new topics stay invisible (TOPIC_NOT_FOUND) until that periodic registration. Updating
// brokerPermission (to its default, read+write) makes the broker register in full at once.
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.attribute.TopicMessageType;
import org.apache.rocketmq.remoting.protocol.body.ClusterInfo;
import org.apache.rocketmq.remoting.protocol.route.BrokerData;
import org.apache.rocketmq.remoting.protocol.route.TopicRouteData;
import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

public class CreateTopics {
    static final int QUEUES = 4;
    // How long a broker gets to show up in namesrv's cluster info, and a new topic in its route.
    // Within a second when the box is idle; a CI run with two suites beside each other (load 20
    // and more on 2 cores) once took longer than the 10 s this was. Waiting ends as soon as the
    // check holds, so only a broker that is really gone costs the whole minute.
    static final long WAIT_MS = 60_000;
    static final String READ_WRITE = "6"; // PermName.PERM_READ | PermName.PERM_WRITE, the default

    public static void main(String[] args) {
        if (args.length < 2) {
            System.err.println("usage: CreateTopics <namesrv> <broker[,broker]> [NAME[:TYPE]...] [--group G] [--orderly-group G]");
            System.exit(2);
        }
        String namesrv = args[0];
        String[] brokers = args[1].split(",");
        int failures = 0;
        DefaultMQAdminExt admin = new DefaultMQAdminExt(10_000);
        admin.setNamesrvAddr(namesrv);
        // A unique instance name keeps concurrent admin JVMs from sharing a client id.
        admin.setInstanceName("mqlease-admin-" + ProcessHandle.current().pid());
        // Only part of the client id (default: the first non-loopback address), but keep
        // everything about the harness on loopback.
        admin.setClientIP("127.0.0.1");
        try {
            admin.start();
        } catch (Exception e) {
            System.err.println("cannot start the admin client against namesrv " + namesrv + ": " + e);
            System.exit(1);
        }
        List<String> created = new ArrayList<>();
        try {
            for (String broker : brokers) {
                if (!ensureRegistered(admin, broker)) {
                    System.err.println("broker " + broker + " is not registered with namesrv " + namesrv
                        + " after " + WAIT_MS + " ms (is it running?)");
                    failures++;
                }
            }
            if (failures > 0) {
                return; // finally + exit below
            }
            for (int i = 2; i < args.length; i++) {
                String a = args[i];
                if (a.equals("--broker-config") || a.equals("--lite-group")) {
                    if (i + 1 >= args.length) {
                        System.err.println(a + " needs a value");
                        failures++;
                        break;
                    }
                    String v = args[++i];
                    int sep = v.indexOf(a.equals("--lite-group") ? ':' : '=');
                    if (sep <= 0) {
                        System.err.println(a + " " + v + ": FAILED: want " + (a.equals("--lite-group") ? "NAME:PARENT" : "KEY=VALUE"));
                        failures++;
                        continue;
                    }
                    for (String broker : brokers) {
                        try {
                            if (a.equals("--lite-group")) {
                                SubscriptionGroupConfig g = new SubscriptionGroupConfig();
                                g.setGroupName(v.substring(0, sep));
                                Map<String, String> attrs = new HashMap<>();
                                attrs.put("+lite.bind.topic", v.substring(sep + 1));
                                g.setAttributes(attrs);
                                admin.createAndUpdateSubscriptionGroupConfig(broker, g);
                                System.out.println("group " + v.substring(0, sep) + ": created on " + broker + " (lite, bound to " + v.substring(sep + 1) + ")");
                            } else {
                                Properties p = new Properties();
                                p.setProperty(v.substring(0, sep), v.substring(sep + 1));
                                admin.updateBrokerConfig(broker, p);
                                System.out.println("broker " + broker + ": " + v);
                            }
                        } catch (Exception e) {
                            System.err.println(a + " " + v + " on " + broker + ": FAILED: " + e);
                            failures++;
                        }
                    }
                    continue;
                }
                if (a.equals("--group") || a.equals("--orderly-group") || a.equals("--group-if-absent")) {
                    if (i + 1 >= args.length) {
                        System.err.println(a + " needs a name");
                        failures++;
                        break;
                    }
                    String name = args[++i];
                    boolean orderly = a.equals("--orderly-group");
                    for (String broker : brokers) {
                        if (a.equals("--group-if-absent") && groupExists(admin, broker, name)) {
                            System.out.println("group " + name + ": exists on " + broker);
                            continue;
                        }
                        try {
                            SubscriptionGroupConfig g = new SubscriptionGroupConfig();
                            g.setGroupName(name);
                            g.setConsumeMessageOrderly(orderly);
                            admin.createAndUpdateSubscriptionGroupConfig(broker, g);
                            System.out.println("group " + name + ": created on " + broker + (orderly ? " (orderly)" : ""));
                        } catch (Exception e) {
                            System.err.println("group " + name + " on " + broker + ": FAILED: " + e);
                            failures++;
                        }
                    }
                    continue;
                }
                if (a.startsWith("-")) {
                    System.err.println("unknown option " + a);
                    failures++;
                    continue;
                }
                String name = a;
                TopicMessageType type = TopicMessageType.NORMAL;
                int colon = a.lastIndexOf(':');
                if (colon > 0) {
                    name = a.substring(0, colon);
                    try {
                        type = TopicMessageType.valueOf(a.substring(colon + 1).toUpperCase(Locale.ROOT));
                    } catch (IllegalArgumentException e) {
                        System.err.println("topic " + name + ": FAILED: unknown type " + a.substring(colon + 1));
                        failures++;
                        continue;
                    }
                }
                boolean all = true;
                for (String broker : brokers) {
                    try {
                        TopicConfig tc = new TopicConfig(name, QUEUES, QUEUES);
                        // The admin path wants attribute keys with a "+" (add/alter) prefix; note
                        // TopicConfig.setTopicMessageType would store the bare "message.type" key,
                        // which the broker rejects ("add/alter attribute format is wrong").
                        Map<String, String> attrs = new HashMap<>();
                        attrs.put("+message.type", type.getValue());
                        tc.setAttributes(attrs);
                        admin.createAndUpdateTopicConfig(broker, tc);
                        System.out.println("topic " + name + ": created on " + broker + " (" + type + ", "
                            + QUEUES + " read/" + QUEUES + " write queues)");
                    } catch (Exception e) {
                        System.err.println("topic " + name + " on " + broker + ": FAILED: " + e);
                        failures++;
                        all = false;
                    }
                }
                if (all) {
                    created.add(name);
                }
            }
            // What QueryRoute will see: the broker registers each new topic with the name
            // server before replying, so this normally passes at once.
            for (String name : created) {
                if (!routeVisible(admin, name, brokers.length)) {
                    System.err.println("topic " + name + ": FAILED: not visible in namesrv " + namesrv
                        + " after " + WAIT_MS + " ms");
                    failures++;
                }
            }
        } finally {
            admin.shutdown();
            System.out.flush();
            // Client threads are non-daemon; exit explicitly.
            System.exit(failures == 0 ? 0 : 1);
        }
    }

    static boolean registered(DefaultMQAdminExt admin, String broker) {
        try {
            ClusterInfo ci = admin.examineBrokerClusterInfo();
            for (BrokerData bd : ci.getBrokerAddrTable().values()) {
                if (bd.getBrokerAddrs().containsValue(broker)) {
                    return true;
                }
            }
        } catch (Exception ignored) {
            // not reachable yet
        }
        return false;
    }

    // The broker answers GET_SUBSCRIPTIONGROUP_CONFIG through findSubscriptionGroupConfig,
    // which itself creates a plain group when autoCreateSubscriptionGroup is on (our
    // broker.conf): then the answer is that new group, and nothing is left to do.
    static boolean groupExists(DefaultMQAdminExt admin, String broker, String name) {
        try {
            return admin.examineSubscriptionGroupConfig(broker, name) != null;
        } catch (Exception e) {
            return false; // SUBSCRIPTION_GROUP_NOT_EXIST
        }
    }

    static boolean ensureRegistered(DefaultMQAdminExt admin, String broker) {
        if (registered(admin, broker)) {
            return true;
        }
        try {
            Properties p = new Properties();
            p.setProperty("brokerPermission", READ_WRITE);
            admin.updateBrokerConfig(broker, p); // triggers registerBrokerAll(force)
        } catch (Exception e) {
            System.err.println("asking broker " + broker + " to register failed: " + e);
        }
        return waitFor(() -> registered(admin, broker));
    }

    // Routable once namesrv lists the topic's queues on every broker it was created on.
    static boolean routeVisible(DefaultMQAdminExt admin, String topic, int brokers) {
        return waitFor(() -> {
            try {
                TopicRouteData r = admin.examineTopicRouteInfo(topic);
                return r != null && r.getQueueDatas().size() >= brokers;
            } catch (Exception e) {
                return false; // TOPIC_NOT_EXIST until registered
            }
        });
    }

    static boolean waitFor(java.util.function.BooleanSupplier check) {
        long deadline = System.currentTimeMillis() + WAIT_MS;
        while (!check.getAsBoolean()) {
            if (System.currentTimeMillis() >= deadline) {
                return false;
            }
            try {
                Thread.sleep(200);
            } catch (InterruptedException e) {
                return false;
            }
        }
        return true;
    }
}
