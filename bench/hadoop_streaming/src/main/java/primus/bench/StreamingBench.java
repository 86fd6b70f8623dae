package primus.bench;

import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.mapred.JobConf;
import org.apache.hadoop.mapreduce.v2.MiniMRYarnCluster;
import org.apache.hadoop.streaming.StreamJob;
import org.apache.hadoop.util.ToolRunner;
import org.apache.hadoop.yarn.api.records.ApplicationReport;
import org.apache.hadoop.yarn.api.records.YarnApplicationState;
import org.apache.hadoop.yarn.client.api.YarnClient;
import org.apache.hadoop.yarn.conf.YarnConfiguration;

/**
 * Benchmark driver (bench/hadoop_streaming.py runs it): one JVM with a MiniDFSCluster (1 DataNode)
 * and a MiniMRYarnCluster (ResourceManager, 1 NodeManager, JobHistoryServer) that runs Hadoop
 * Streaming jobs on request.
 *
 * <pre>
 * java ... primus.bench.StreamingBench WORK_DIR
 * </pre>
 *
 * Once the clusters are up it prints {@code BENCH ready}, then reads commands on stdin, one per
 * line, fields separated by tabs, and answers each with one {@code BENCH ...} line on stdout
 * (everything else goes to stderr):
 *
 * <pre>
 * put LOCAL_FILE HDFS_PATH                              -> BENCH put SECONDS BYTES
 * run HDFS_INPUT NUM_MAPS MAPPER_COMMAND FILE[,FILE..]  -> BENCH run SECONDS MAPS SUM OUTPUT_LINES
 * </pre>
 *
 * {@code run} times a map-only streaming job from submission (StreamJob packaging its job jar)
 * to completion, then adds up the second field of the output lines that start with
 * {@code records<TAB>} (what each mapper says it consumed). EOF on stdin stops the clusters.
 */
public final class StreamingBench {
  private StreamingBench() {}

  /** Waits up to {@code seconds} until no application is still running on the cluster. */
  private static void quiesce(YarnClient yarn, int seconds) throws Exception {
    long deadline = System.nanoTime() + seconds * 1_000_000_000L;
    while (System.nanoTime() < deadline) {
      boolean busy = false;
      for (ApplicationReport app : yarn.getApplications()) {
        YarnApplicationState state = app.getYarnApplicationState();
        busy |= state != YarnApplicationState.FINISHED && state != YarnApplicationState.FAILED
            && state != YarnApplicationState.KILLED;
      }
      if (!busy) {
        return;
      }
      Thread.sleep(100);
    }
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 1) {
      System.err.println("usage: StreamingBench WORK_DIR");
      System.exit(2);
    }
    // Hadoop and StreamJob print to stdout; only the protocol lines may go there.
    PrintStream out = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), true,
        StandardCharsets.UTF_8);
    System.setOut(System.err);

    File work = new File(args[0]).getAbsoluteFile();
    work.mkdirs();
    long t0 = System.nanoTime();

    Configuration dfsConf = new Configuration();
    dfsConf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, new File(work, "hdfs").getPath());
    dfsConf.set("hadoop.tmp.dir", new File(work, "tmp").getPath());
    dfsConf.setBoolean("dfs.permissions.enabled", false);
    dfsConf.setInt("dfs.replication", 1);
    MiniDFSCluster dfs = new MiniDFSCluster.Builder(dfsConf).numDataNodes(1).format(true).build();
    dfs.waitActive();
    String defaultFs = dfs.getFileSystem().getUri().toString();

    Configuration conf = new Configuration(dfs.getConfiguration(0));
    conf.set("fs.defaultFS", defaultFs);
    conf.set("mapreduce.jobtracker.staging.root.dir", "/staging");
    conf.set("yarn.app.mapreduce.am.staging-dir", "/staging");
    // Same resources as the project's minicluster: room for the AM and a dozen map containers,
    // no memory policing of local processes.
    conf.setInt(YarnConfiguration.NM_PMEM_MB, 8192);
    conf.setInt(YarnConfiguration.NM_VCORES, 16);
    conf.setBoolean(YarnConfiguration.NM_PMEM_CHECK_ENABLED, false);
    conf.setBoolean(YarnConfiguration.NM_VMEM_CHECK_ENABLED, false);
    conf.setInt(YarnConfiguration.RM_SCHEDULER_MINIMUM_ALLOCATION_MB, 64);
    conf.setBoolean(YarnConfiguration.TIMELINE_SERVICE_ENABLED, false);
    conf.set("yarn.scheduler.capacity.maximum-am-resource-percent", "1.0");
    // The same fast heartbeats as the project's minicluster (so both clusters react alike).
    conf.setInt(YarnConfiguration.RM_NM_HEARTBEAT_INTERVAL_MS, 250);
    conf.setLong("yarn.resourcemanager.nodemanagers.heartbeat-interval-max-ms", 250);
    conf.setLong("yarn.resourcemanager.nodemanagers.heartbeat-interval-min-ms", 250);
    // Small JVMs; Java 17 needs the --add-opens in the AM and task JVMs too.
    String opens = System.getProperty("bench.javaOpens", "");
    conf.setInt("yarn.app.mapreduce.am.resource.mb", 512);
    conf.set("yarn.app.mapreduce.am.command-opts", "-Xmx384m -XX:+UseSerialGC " + opens);
    conf.setInt("mapreduce.map.memory.mb", 256);
    conf.set("mapreduce.map.java.opts", "-Xmx192m -XX:+UseSerialGC " + opens);
    conf.setInt("mapreduce.reduce.memory.mb", 256);
    conf.set("mapreduce.reduce.java.opts", "-Xmx192m -XX:+UseSerialGC " + opens);

    MiniMRYarnCluster mr = new MiniMRYarnCluster("streaming-bench", 1);
    mr.init(conf);
    mr.start();
    Configuration live = new Configuration(mr.getConfig());
    // Client-side polling: the defaults (5 s completion poll) would add seconds to every job; 100 ms
    // is what a latency-minded operator sets and close to Primus' client poll.
    live.setInt("mapreduce.client.completion.pollinterval", 100);
    live.setInt("mapreduce.client.progressmonitor.pollinterval", 100);
    // Each record is processed exactly once: no speculative duplicates.
    live.setBoolean("mapreduce.map.speculative", false);
    live.setBoolean("mapreduce.reduce.speculative", false);
    FileSystem fs = FileSystem.get(live);
    out.printf("BENCH ready %.1f %s %s%n", (System.nanoTime() - t0) / 1e9, defaultFs,
        live.get(YarnConfiguration.RM_ADDRESS));

    YarnClient yarn = YarnClient.createYarnClient();
    yarn.init(live);
    yarn.start();
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    int runs = 0;
    try {
      for (String line; (line = in.readLine()) != null; ) {
        String[] f = line.split("\t");
        try {
          if (f[0].equals("put") && f.length == 3) {
            long s = System.nanoTime();
            fs.copyFromLocalFile(false, true, new Path(f[1]), new Path(f[2]));
            out.printf("BENCH put %.3f %d%n", (System.nanoTime() - s) / 1e9,
                fs.getFileStatus(new Path(f[2])).getLen());
          } else if (f[0].equals("run") && f.length == 5) {
            runs++;
            String output = "/out/run-" + runs;
            List<String> argv = new ArrayList<>(List.of(
                "-D", "mapreduce.job.maps=" + f[2],
                "-D", "mapreduce.job.reduces=0",
                "-D", "mapreduce.job.name=streaming-bench-" + runs,
                "-input", f[1], "-output", output, "-mapper", f[3]));
            for (String file : f[4].split(",")) {
              argv.add("-file");
              argv.add(file);
            }
            long s = System.nanoTime();
            int rc = ToolRunner.run(new JobConf(live), new StreamJob(), argv.toArray(new String[0]));
            double seconds = (System.nanoTime() - s) / 1e9;
            if (rc != 0) {
              out.println("BENCH error streaming job exited " + rc + " (details on stderr)");
              continue;
            }
            long sum = 0;
            int maps = 0;
            int lines = 0;
            for (FileStatus part : fs.listStatus(new Path(output))) {
              if (!part.getPath().getName().startsWith("part-")) {
                continue;
              }
              maps++;
              try (BufferedReader r = new BufferedReader(new InputStreamReader(fs.open(part.getPath()),
                  StandardCharsets.UTF_8))) {
                for (String o; (o = r.readLine()) != null; ) {
                  lines++;
                  if (o.startsWith("records\t")) {
                    sum += Long.parseLong(o.substring("records\t".length()).trim());
                  }
                }
              }
            }
            // The MR AM lingers a few seconds after the client sees the job done: let it exit
            // (untimed) so that it does not eat CPU from whatever runs next.
            quiesce(yarn, 30);
            out.printf("BENCH run %.3f %d %d %d%n", seconds, maps, sum, lines);
          } else {
            out.println("BENCH error unknown command: " + line);
          }
        } catch (Exception e) {
          e.printStackTrace();
          out.println("BENCH error " + e.toString().replace('\n', ' '));
        }
      }
    } finally {
      yarn.stop();
      try {
        mr.stop();
      } catch (Throwable t) {
        System.err.println("stopping MapReduce: " + t);
      }
      dfs.shutdown();
    }
    out.println("BENCH stopped");
    // Non-daemon threads of the mini clusters may linger.
    System.exit(0);
  }
}
