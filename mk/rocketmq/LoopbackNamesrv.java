// Starts a RocketMQ name server exactly like NamesrvStartup (same -c properties file, same
// "The Name Server boot success" line on stdout), except that its internal remoting client
// probes 127.0.0.1 instead of the host's first non-loopback address.
//
// Why: NamesrvController.start() (5.2.0) points its own remoting client at
// NetworkUtil.getLocalAddress() + ":" + listenPort (e.g. 192.0.2.2:19876) and that client
// then tries to connect there every 3 s (NettyRemotingClient.scanAvailableNameSrv). Our name
// server binds 127.0.0.1 only, so those connects are refused noise, and the test harness must
// never dial a non-loopback address. There is no setting for it, so the client is swapped for
// one whose address list is pinned to loopback, after initialize() and before start().
//
// Run by mk/rocketmq.sh with the single-file source launcher:
//   java -cp '<lib>/*' LoopbackNamesrv.java -c namesrv.conf
import java.lang.reflect.Field;
import java.util.Collections;
import java.util.List;
import org.apache.rocketmq.namesrv.NamesrvController;
import org.apache.rocketmq.namesrv.NamesrvStartup;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyRemotingClient;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;

public class LoopbackNamesrv {
    public static void main(String[] args) {
        try {
            NamesrvStartup.parseCommandlineAndConfigFile(args);
            NamesrvController controller = NamesrvStartup.createNamesrvController();
            if (!controller.initialize()) {
                System.err.println("name server initialize() failed");
                controller.shutdown();
                System.exit(-3);
            }
            final String self = "127.0.0.1:" + controller.getNettyServerConfig().getListenPort();
            Field clientConfigField = NamesrvController.class.getDeclaredField("nettyClientConfig");
            clientConfigField.setAccessible(true);
            NettyClientConfig clientConfig = (NettyClientConfig) clientConfigField.get(controller);
            Field clientField = NamesrvController.class.getDeclaredField("remotingClient");
            clientField.setAccessible(true);
            // The replaced client was never started (start() does that), so it holds no
            // threads or sockets; nothing else keeps a reference to it.
            clientField.set(controller, new NettyRemotingClient(clientConfig) {
                @Override
                public void updateNameServerAddressList(List<String> addrs) {
                    super.updateNameServerAddressList(Collections.singletonList(self));
                }
            });
            Runtime.getRuntime().addShutdownHook(new Thread(controller::shutdown, "namesrv-shutdown"));
            controller.start();
            System.out.printf("The Name Server boot success. serializeType=%s, address %s:%d%n",
                RemotingCommand.getSerializeTypeConfigInThisServer(),
                controller.getNettyServerConfig().getBindAddress(),
                controller.getNettyServerConfig().getListenPort());
        } catch (Throwable e) {
            e.printStackTrace();
            System.exit(-1);
        }
    }
}
