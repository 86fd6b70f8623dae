package primus.minicluster;

import java.io.File;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.CountDownLatch;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;

/**
 * One JVM on 127.0.0.1 with a MiniDFSCluster (1 DataNode, WebHDFS) and a MiniYARNCluster
 * (ResourceManager + 1 NodeManager running containers as local processes). Faults on request
 * for the chaos suite: the DataNode stopped and started, the ResourceManager restarted
 * ({@link #serveControl}).
 *
 * <pre>
 * java ... primus.minicluster.Launcher WORK_DIR CONF_DIR READY_FILE APP_CLASSPATH [kerberos]
 * </pre>
 *
 * WORK_DIR holds the clusters' data and logs, CONF_DIR receives core-site.xml, hdfs-site.xml
 * and yarn-site.xml for clients, READY_FILE (JSON with the addresses) is written last, once
 * everything is up. APP_CLASSPATH (comma-separated) becomes yarn.application.classpath: what
 * containers such as skein's application master put on their classpath. SIGTERM stops both
 * clusters (the NodeManager kills its containers) and removes the ready file. With
 * {@code kerberos}, a KDC starts first and the clusters are secure (see {@link Kerberos}).
 */
public final class Launcher {
  private static final String HOST = "127.0.0.1";

  private Launcher() {}

  private static int freePort() throws IOException {
    try (ServerSocket socket = new ServerSocket()) {
      socket.setReuseAddress(true);
      socket.bind(new InetSocketAddress(HOST, 0));
      return socket.getLocalPort();
    }
  }

  private static String addr(int port) {
    return HOST + ":" + port;
  }

  public static void main(String[] args) throws Exception {
    try {
      run(args);
    } catch (Throwable t) {
      // Exit (threads such as the KDC's would keep the JVM up): the start script sees it at once.
      t.printStackTrace();
      System.exit(1);
    }
  }

  private static void run(String[] args) throws Exception {
    if (args.length != 4 && !(args.length == 5 && args[4].equals("kerberos"))) {
      System.err.println("usage: Launcher WORK_DIR CONF_DIR READY_FILE APP_CLASSPATH [kerberos]");
      System.exit(2);
    }
    File work = new File(args[0]).getAbsoluteFile();
    File confDir = new File(args[1]).getAbsoluteFile();
    Path ready = new File(args[2]).getAbsoluteFile().toPath();
    String appClasspath = args[3];
    Files.deleteIfExists(ready);
    confDir.mkdirs();
    work.mkdirs();

    long started = System.nanoTime();
    Kerberos kerberos = args.length == 5 ? Kerberos.start(work) : null;

    // ---------------------------------------------------------------- HDFS
    Configuration dfsConf = new Configuration();
    dfsConf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, new File(work, "hdfs").getPath());
    dfsConf.set("hadoop.tmp.dir", new File(work, "tmp").getPath());
    dfsConf.setBoolean("dfs.webhdfs.enabled", true);
    dfsConf.setBoolean("dfs.permissions.enabled", false);
    dfsConf.setInt("dfs.replication", 1);
    dfsConf.set("dfs.namenode.http-address", addr(freePort()));
    dfsConf.set("dfs.datanode.address", addr(0));
    dfsConf.set("dfs.datanode.http.address", addr(0));
    dfsConf.set("dfs.datanode.ipc.address", addr(0));
    dfsConf.set("dfs.datanode.hostname", HOST);
    // Any user may act as any other (skein's driver and the tests run as whoever started this).
    dfsConf.set("hadoop.proxyuser." + System.getProperty("user.name") + ".hosts", "*");
    dfsConf.set("hadoop.proxyuser." + System.getProperty("user.name") + ".groups", "*");
    if (kerberos != null) {
      kerberos.secureHdfs(dfsConf);
    }
    // Settings a test needs (e.g. delegation tokens that expire within minutes): "key=value,key=value"
    // in $PRIMUS_MINICLUSTER_CONF, for HDFS and YARN alike (YARN's configuration starts from HDFS's).
    String extra = System.getenv("PRIMUS_MINICLUSTER_CONF");
    if (extra != null && !extra.isBlank()) {
      for (String setting : extra.split(",")) {
        String[] kv = setting.split("=", 2);
        if (kv.length != 2) {
          throw new IllegalArgumentException("PRIMUS_MINICLUSTER_CONF: not key=value: " + setting);
        }
        dfsConf.set(kv[0].trim(), kv[1].trim());
        System.out.println("minicluster: " + kv[0].trim() + "=" + kv[1].trim());
      }
    }
    int nnPort = freePort();
    MiniDFSCluster dfs = new MiniDFSCluster.Builder(dfsConf)
        .numDataNodes(1)
        .nameNodePort(nnPort)
        .nameNodeHttpPort(Integer.parseInt(dfsConf.get("dfs.namenode.http-address").split(":")[1]))
        .format(true)
        .build();
    dfs.waitActive();
    String defaultFs = "hdfs://" + addr(dfs.getNameNodePort());
    InetSocketAddress nnHttp = dfs.getNameNode().getHttpAddress();
    String webhdfs = HOST + ":" + nnHttp.getPort();
    System.out.println("minicluster: HDFS up at " + defaultFs + ", WebHDFS http://" + webhdfs);

    // ---------------------------------------------------------------- YARN
    YarnConfiguration yarnConf = new YarnConfiguration(dfs.getConfiguration(0));
    yarnConf.set("fs.defaultFS", defaultFs);
    yarnConf.setBoolean(YarnConfiguration.YARN_MINICLUSTER_FIXED_PORTS, true);
    yarnConf.setBoolean(YarnConfiguration.YARN_MINICLUSTER_USE_RPC, true);
    yarnConf.set(YarnConfiguration.RM_HOSTNAME, HOST);
    yarnConf.set(YarnConfiguration.RM_ADDRESS, addr(freePort()));
    yarnConf.set(YarnConfiguration.RM_SCHEDULER_ADDRESS, addr(freePort()));
    yarnConf.set(YarnConfiguration.RM_RESOURCE_TRACKER_ADDRESS, addr(freePort()));
    yarnConf.set(YarnConfiguration.RM_ADMIN_ADDRESS, addr(freePort()));
    yarnConf.set(YarnConfiguration.RM_WEBAPP_ADDRESS, addr(freePort()));
    yarnConf.set(YarnConfiguration.NM_ADDRESS, addr(freePort()));
    yarnConf.set(YarnConfiguration.NM_LOCALIZER_ADDRESS, addr(freePort()));
    yarnConf.set(YarnConfiguration.NM_WEBAPP_ADDRESS, addr(freePort()));
    yarnConf.set(YarnConfiguration.NM_COLLECTOR_SERVICE_ADDRESS, addr(freePort()));
    yarnConf.setBoolean(YarnConfiguration.TIMELINE_SERVICE_ENABLED, false);
    // Room for about ten small containers; no memory policing of local processes.
    yarnConf.setInt(YarnConfiguration.NM_PMEM_MB, 8192);
    yarnConf.setInt(YarnConfiguration.NM_VCORES, 16);
    yarnConf.setBoolean(YarnConfiguration.NM_PMEM_CHECK_ENABLED, false);
    yarnConf.setBoolean(YarnConfiguration.NM_VMEM_CHECK_ENABLED, false);
    yarnConf.setInt(YarnConfiguration.RM_SCHEDULER_MINIMUM_ALLOCATION_MB, 64);
    yarnConf.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_MB, 8192);
    yarnConf.setInt(YarnConfiguration.RM_SCHEDULER_MINIMUM_ALLOCATION_VCORES, 1);
    yarnConf.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_VCORES, 16);
    yarnConf.set("yarn.scheduler.capacity.root.queues", "default");
    yarnConf.set("yarn.scheduler.capacity.root.default.capacity", "100");
    yarnConf.set("yarn.scheduler.capacity.root.default.maximum-capacity", "100");
    yarnConf.set("yarn.scheduler.capacity.maximum-am-resource-percent", "1.0");
    yarnConf.set(YarnConfiguration.YARN_APPLICATION_CLASSPATH, appClasspath);
    // Container logs stay on local disk (read them there or through the NodeManager's REST
    // API), and the container directories are kept for a while after an application ends, for
    // post-mortems. No log aggregation: skein 0.8.2's application_logs looks for aggregated
    // logs in the Hadoop 2 layout (<remote dir>/<user>/logs/<app id>), while Hadoop 3.3+ writes
    // <remote dir>/<user>/bucket-logs-tfile/<bucket>/<app id>, so it never finds them.
    yarnConf.setBoolean(YarnConfiguration.LOG_AGGREGATION_ENABLED, false);
    yarnConf.setInt(YarnConfiguration.DEBUG_NM_DELETE_DELAY_SEC, 3600);
    yarnConf.setLong(YarnConfiguration.NM_LOG_RETAIN_SECONDS, 3 * 3600);
    yarnConf.setInt(YarnConfiguration.RM_AM_MAX_ATTEMPTS, 4);
    // Work-preserving ResourceManager restart (the chaos suite restarts it): applications and their
    // running containers are kept, in a state store on local disk.
    yarnConf.setBoolean(YarnConfiguration.RECOVERY_ENABLED, true);
    yarnConf.setBoolean(YarnConfiguration.RM_WORK_PRESERVING_RECOVERY_ENABLED, true);
    yarnConf.set(YarnConfiguration.RM_STORE,
        "org.apache.hadoop.yarn.server.resourcemanager.recovery.FileSystemRMStateStore");
    yarnConf.set(YarnConfiguration.FS_RM_STATE_STORE_URI, new File(work, "rm-state").toURI().toString());
    // NodeManagers and AMs try a ResourceManager that went away again every second (default 30 s).
    yarnConf.setLong(YarnConfiguration.RESOURCEMANAGER_CONNECT_RETRY_INTERVAL_MS, 1000);
    // A restarted ResourceManager allocates again after 2 s (default 10 s: NodeManagers report back).
    yarnConf.setLong(YarnConfiguration.RM_WORK_PRESERVING_RECOVERY_SCHEDULING_WAIT_MS, 2000);
    // Heartbeats fast enough for tests.
    yarnConf.setInt(YarnConfiguration.RM_NM_HEARTBEAT_INTERVAL_MS, 250);
    yarnConf.setLong("yarn.resourcemanager.nodemanagers.heartbeat-interval-max-ms", 250);
    yarnConf.setLong("yarn.resourcemanager.nodemanagers.heartbeat-interval-min-ms", 250);
    yarnConf.setInt(YarnConfiguration.RM_AM_EXPIRY_INTERVAL_MS, 60000);

    if (kerberos != null) {
      kerberos.secureYarn(yarnConf);
    }

    // MiniYARNCluster keeps its local and log dirs under ./target/<name> (cwd = WORK_DIR).
    MiniYARNCluster yarn = new MiniYARNCluster("yarn", 1, 1, 1);
    yarn.init(yarnConf);
    yarn.start();
    if (!yarn.waitForNodeManagersToConnect(60000)) {
      throw new IllegalStateException("NodeManager did not register with the ResourceManager");
    }
    Configuration live = yarn.getConfig();
    System.out.println("minicluster: YARN up, RM " + loopback(live.get(YarnConfiguration.RM_ADDRESS))
        + ", web http://" + live.get(YarnConfiguration.RM_WEBAPP_ADDRESS));

    // ---------------------------------------------------------------- client configuration
    Map<String, String> core = new LinkedHashMap<>();
    core.put("fs.defaultFS", defaultFs);
    core.put("hadoop.security.authentication", "simple");
    if (kerberos != null) {
      kerberos.clientCore(core);
    }
    writeSite(new File(confDir, "core-site.xml"), core);

    Map<String, String> hdfs = new LinkedHashMap<>();
    hdfs.put("dfs.namenode.rpc-address", addr(dfs.getNameNodePort()));
    hdfs.put("dfs.namenode.http-address", webhdfs);
    hdfs.put("dfs.webhdfs.enabled", "true");
    hdfs.put("dfs.replication", "1");
    hdfs.put("dfs.permissions.enabled", "false");
    if (kerberos != null) {
      kerberos.clientHdfs(hdfs);
    }
    writeSite(new File(confDir, "hdfs-site.xml"), hdfs);

    Map<String, String> yarnSite = new LinkedHashMap<>();
    String[] keys = {
      YarnConfiguration.RM_HOSTNAME,
      YarnConfiguration.RM_ADDRESS,
      YarnConfiguration.RM_SCHEDULER_ADDRESS,
      YarnConfiguration.RM_RESOURCE_TRACKER_ADDRESS,
      YarnConfiguration.RM_ADMIN_ADDRESS,
      YarnConfiguration.RM_WEBAPP_ADDRESS,
      YarnConfiguration.YARN_APPLICATION_CLASSPATH,
      YarnConfiguration.RM_SCHEDULER_MINIMUM_ALLOCATION_MB,
      YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_MB,
      YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_VCORES,
      YarnConfiguration.LOG_AGGREGATION_ENABLED,
      YarnConfiguration.TIMELINE_SERVICE_ENABLED,
    };
    for (String key : keys) {
      String value = live.get(key);
      if (value != null) {
        yarnSite.put(key, loopback(value));
      }
    }
    // No separate proxy server: the ResourceManager serves /proxy/<app id>/ on its web address.
    yarnSite.put(YarnConfiguration.PROXY_ADDRESS, live.get(YarnConfiguration.RM_WEBAPP_ADDRESS));
    if (kerberos != null) {
      kerberos.clientYarn(yarnSite);
    }
    writeSite(new File(confDir, "yarn-site.xml"), yarnSite);

    // ---------------------------------------------------------------- ready
    Map<String, String> info = new LinkedHashMap<>();
    info.put("pid", String.valueOf(ProcessHandle.current().pid()));
    info.put("rm_address", loopback(live.get(YarnConfiguration.RM_ADDRESS)));
    info.put("rm_scheduler_address", loopback(live.get(YarnConfiguration.RM_SCHEDULER_ADDRESS)));
    info.put("rm_web", "http://" + live.get(YarnConfiguration.RM_WEBAPP_ADDRESS));
    info.put("nm_address", loopback(yarn.getNodeManager(0).getNMContext().getNodeId().toString()));
    // MiniYARNCluster binds the NodeManager's web server to localhost:0 whatever the config says.
    info.put("nm_web", "http://" + HOST + ":" + yarn.getNodeManager(0).getNMContext().getHttpPort());
    info.put("nm_log_dirs", String.join(",", yarn.getNodeManager(0).getConfig()
        .getTrimmedStrings(YarnConfiguration.NM_LOG_DIRS)));
    info.put("fs_default", defaultFs);
    info.put("namenode_rpc", addr(dfs.getNameNodePort()));
    info.put("webhdfs", "http://" + webhdfs);
    info.put("hadoop_conf_dir", confDir.getPath());
    if (kerberos != null) {
      kerberos.ready(info);
    }
    info.put("startup_seconds", String.format("%.1f", (System.nanoTime() - started) / 1e9));
    StringBuilder json = new StringBuilder("{\n");
    int i = 0;
    for (Map.Entry<String, String> e : info.entrySet()) {
      json.append("  \"").append(e.getKey()).append("\": \"")
          .append(e.getValue().replace("\\", "\\\\").replace("\"", "\\\"")).append('"')
          .append(++i < info.size() ? ",\n" : "\n");
    }
    json.append("}\n");
    Path tmp = ready.resolveSibling(ready.getFileName() + ".tmp");
    Files.writeString(tmp, json.toString(), StandardCharsets.UTF_8);
    Files.move(tmp, ready, StandardCopyOption.ATOMIC_MOVE);
    System.out.println("minicluster: ready in " + info.get("startup_seconds") + " s: " + ready);

    CountDownLatch stopped = new CountDownLatch(1);
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      System.out.println("minicluster: stopping");
      try {
        Files.deleteIfExists(ready);
      } catch (IOException ignored) {
        // best effort
      }
      try {
        yarn.stop();
      } catch (Throwable t) {
        System.out.println("minicluster: stopping YARN: " + t);
      }
      try {
        dfs.shutdown();
      } catch (Throwable t) {
        // MiniDFSCluster unregisters a shutdown hook, which fails while the JVM shuts down.
        System.out.println("minicluster: stopping HDFS: " + t);
      }
      if (kerberos != null) {
        kerberos.stop();
      }
      System.out.println("minicluster: stopped");
      stopped.countDown();
    }, "minicluster-stop"));
    serveControl(new File(work, "control"), dfs, yarn);
  }

  /**
   * Faults on request, for the chaos suite: a file {@code <name>.cmd} in {@code dir} holding a
   * command is carried out, then answered in {@code <name>.out} ("ok ..." or "error ...").
   * {@code datanode-stop} stops the DataNode (readers then meet a refused connection where the
   * NameNode sends them), {@code datanode-start} starts it again on the same ports,
   * {@code resourcemanager-restart} restarts the ResourceManager (work-preserving recovery).
   */
  private static void serveControl(File dir, MiniDFSCluster dfs, MiniYARNCluster yarn)
      throws InterruptedException {
    dir.mkdirs();
    MiniDFSCluster.DataNodeProperties stoppedDataNode = null;
    while (true) {
      File[] requests = dir.listFiles((d, name) -> name.endsWith(".cmd"));
      java.util.Arrays.sort(requests == null ? new File[0] : requests);
      for (File request : requests == null ? new File[0] : requests) {
        String answer;
        try {
          String command = Files.readString(request.toPath(), StandardCharsets.UTF_8).trim();
          System.out.println("minicluster: control: " + command);
          if (command.equals("datanode-stop") && stoppedDataNode == null) {
            stoppedDataNode = dfs.stopDataNode(0);
            answer = "ok the DataNode is stopped";
          } else if (command.equals("datanode-start") && stoppedDataNode != null) {
            dfs.restartDataNode(stoppedDataNode, true);
            dfs.waitActive();
            stoppedDataNode = null;
            answer = "ok the DataNode is up again";
          } else if (command.equals("resourcemanager-restart")) {
            // A new ResourceManager on the same ports recovers the applications from the state
            // store; NodeManagers resync and report their containers, AMs register again.
            yarn.restartResourceManager(0);
            answer = "ok the ResourceManager restarted";
          } else {
            answer = "error cannot do '" + command + "' now (the DataNode is "
                + (stoppedDataNode == null ? "up" : "stopped") + ")";
          }
        } catch (Throwable t) {
          answer = "error " + t;
        }
        System.out.println("minicluster: control: " + answer);
        String name = request.getName().replaceFirst("\\.cmd$", "");
        try {
          Path tmp = new File(dir, name + ".out.tmp").toPath();
          Files.writeString(tmp, answer + "\n", StandardCharsets.UTF_8);
          Files.move(tmp, new File(dir, name + ".out").toPath(), StandardCopyOption.ATOMIC_MOVE);
          Files.deleteIfExists(request.toPath());
        } catch (IOException e) {
          System.out.println("minicluster: control: cannot answer " + request + ": " + e);
        }
      }
      Thread.sleep(100);
    }
  }

  private static String loopback(String address) {
    return address.startsWith("localhost:") ? HOST + address.substring("localhost".length()) : address;
  }

  private static void writeSite(File file, Map<String, String> props) throws IOException {
    StringBuilder xml = new StringBuilder("<?xml version=\"1.0\"?>\n<configuration>\n");
    for (Map.Entry<String, String> e : props.entrySet()) {
      xml.append("  <property><name>").append(escape(e.getKey())).append("</name><value>")
          .append(escape(e.getValue())).append("</value></property>\n");
    }
    xml.append("</configuration>\n");
    Files.writeString(file.toPath(), xml.toString(), StandardCharsets.UTF_8);
  }

  private static String escape(String s) {
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;");
  }
}
