import java.io.File;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.MiniDFSCluster;

/**
 * regroup's test HDFS: one NameNode and one DataNode in this JVM (Hadoop's own MiniDFSCluster),
 * on loopback, in a directory of its own.
 *
 * <pre>java -cp CLASSES:LIB/* MiniHdfs BASE_DIR [NAMENODE_PORT]</pre>
 *
 * Prints {@code ready hdfs://127.0.0.1:PORT} once the cluster serves (the DataNode registered),
 * then runs until its standard input ends — the process that started it closed it or died, so the
 * cluster never outlives a killed test run — or until SIGTERM; either way it shuts down cleanly.
 * Port 0 (the default) takes a free one. Started by regroup/testing/hdfs.py; compiled by
 * scripts/hdfs/fetch.sh.
 */
public final class MiniHdfs {
  private MiniHdfs() {}

  public static void main(String[] args) throws Exception {
    if (args.length < 1 || args.length > 2) {
      System.err.println("usage: MiniHdfs BASE_DIR [NAMENODE_PORT]");
      System.exit(2);
    }
    File base = new File(args[0]).getAbsoluteFile();
    int port = args.length > 1 ? Integer.parseInt(args[1]) : 0;
    Configuration conf = new HdfsConfiguration();
    conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, base.getPath());
    conf.set("hadoop.tmp.dir", new File(base, "tmp").getPath());
    // Tests write as whoever runs them; one DataNode holds every block.
    conf.setBoolean("dfs.permissions.enabled", false);
    conf.setInt("dfs.replication", 1);
    // A 2-core machine: few handler threads.
    conf.setInt("dfs.namenode.handler.count", 4);
    conf.setInt("dfs.namenode.service.handler.count", 2);
    conf.setInt("dfs.datanode.handler.count", 2);
    MiniDFSCluster cluster = new MiniDFSCluster.Builder(conf)
        .numDataNodes(1)
        .storagesPerDatanode(1)
        .nameNodePort(port)
        .format(true)
        .build();
    cluster.waitActive();
    Thread onSignal = new Thread(cluster::shutdown, "mini-hdfs-shutdown");
    Runtime.getRuntime().addShutdownHook(onSignal);
    System.out.println("ready hdfs://127.0.0.1:" + cluster.getNameNodePort());
    System.out.flush();
    while (System.in.read() != -1) {
      // nothing to read: this only waits for the end of the input
    }
    // Shut down outside a shutdown hook: Hadoop's own hooks cannot be removed from within one.
    Runtime.getRuntime().removeShutdownHook(onSignal);
    cluster.shutdown();
    System.exit(0);
  }
}
