package primus.minicluster;

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.Map;
import java.util.Properties;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.minikdc.MiniKdc;
import org.apache.hadoop.security.UserGroupInformation;

/**
 * The Kerberos mode of the minicluster (Launcher's 5th argument {@code kerberos}): a MiniKdc in
 * the same JVM, one service principal for every daemon, SPNEGO on the HTTP endpoints.
 *
 * <p>All daemons share one JVM, hence one Kerberos login (UserGroupInformation's login user is
 * static: a second login would replace the first daemon's credentials under it): they all run as
 * {@code primus/localhost}. SPNEGO accepts any {@code HTTP/*} principal of the service keytab
 * ({@code HTTP/localhost} and {@code HTTP/127.0.0.1}: clients name the server by the host of the
 * URL, canonicalized or not). The DataNode keeps unprivileged ports without SASL data transfer
 * ({@code ignore.secure.ports.for.testing}). The test user is the local user who started the JVM
 * (containers run as that user anyway), with its own keytab.
 *
 * <p>Written to WORK_DIR: {@code krb5.conf} (for MIT clients: KRB5_CONFIG, and Java's
 * java.security.krb5.conf), {@code keytabs/service.keytab}, {@code keytabs/user.keytab}.
 */
final class Kerberos {
  final MiniKdc kdc;
  final String realm;
  final String service;
  final String user;
  final File serviceKeytab;
  final File userKeytab;
  final File krb5conf;

  private Kerberos(MiniKdc kdc, File work) throws Exception {
    this.kdc = kdc;
    this.realm = kdc.getRealm();
    this.service = "primus/localhost@" + realm;
    this.user = System.getProperty("user.name") + "@" + realm;
    File keytabs = new File(work, "keytabs");
    keytabs.mkdirs();
    serviceKeytab = new File(keytabs, "service.keytab");
    userKeytab = new File(keytabs, "user.keytab");
    kdc.createPrincipal(serviceKeytab, "primus/localhost", "HTTP/localhost", "HTTP/127.0.0.1");
    kdc.createPrincipal(userKeytab, System.getProperty("user.name"));
    krb5conf = new File(work, "krb5.conf");
    String conf = String.join("\n",
        "# Written by the minicluster (Kerberos mode): its MiniKdc.",
        "[libdefaults]",
        "  default_realm = " + realm,
        "  udp_preference_limit = 1",
        "  dns_lookup_kdc = false",
        "  dns_lookup_realm = false",
        "  rdns = false",
        "  dns_canonicalize_hostname = false",
        "  ignore_acceptor_hostname = true",
        "  forwardable = true",
        "[realms]",
        "  " + realm + " = {",
        "    kdc = 127.0.0.1:" + kdc.getPort(),
        "  }",
        "[domain_realm]",
        "  localhost = " + realm,
        "  127.0.0.1 = " + realm,
        "");
    Files.writeString(krb5conf.toPath(), conf, StandardCharsets.UTF_8);
    // Java reads the same file (MiniKdc pointed it at its own, with "localhost" for the KDC).
    System.setProperty("java.security.krb5.conf", krb5conf.getPath());
  }

  static Kerberos start(File work) throws Exception {
    Properties conf = MiniKdc.createConf();
    conf.setProperty(MiniKdc.KDC_BIND_ADDRESS, "127.0.0.1");
    conf.setProperty(MiniKdc.KDC_PORT, "0");
    File dir = new File(work, "kdc");
    dir.mkdirs();
    MiniKdc kdc = new MiniKdc(conf, dir);
    kdc.start();
    Kerberos k = new Kerberos(kdc, work);
    System.out.println("minicluster: KDC up at 127.0.0.1:" + kdc.getPort() + ", realm " + k.realm);
    return k;
  }

  /** Security settings of the HDFS daemons (before MiniDFSCluster is built). */
  void secureHdfs(Configuration conf) {
    common(conf);
    conf.set("dfs.namenode.kerberos.principal", service);
    conf.set("dfs.namenode.keytab.file", serviceKeytab.getPath());
    conf.set("dfs.datanode.kerberos.principal", service);
    conf.set("dfs.datanode.keytab.file", serviceKeytab.getPath());
    conf.set("dfs.web.authentication.kerberos.principal", "*");
    conf.set("dfs.web.authentication.kerberos.keytab", serviceKeytab.getPath());
    conf.set("dfs.namenode.kerberos.internal.spnego.principal", "HTTP/localhost@" + realm);
    conf.setBoolean("dfs.block.access.token.enable", true);
    // No privileged ports, no SASL on data transfer (clients would need it configured too).
    conf.setBoolean("ignore.secure.ports.for.testing", true);
    UserGroupInformation.setConfiguration(conf);
  }

  /** Security settings of the YARN daemons (their configuration is a copy of HDFS's). */
  void secureYarn(Configuration conf) {
    common(conf);
    conf.set("yarn.resourcemanager.principal", service);
    conf.set("yarn.resourcemanager.keytab", serviceKeytab.getPath());
    conf.set("yarn.nodemanager.principal", service);
    conf.set("yarn.nodemanager.keytab", serviceKeytab.getPath());
    conf.set("yarn.resourcemanager.webapp.spnego-principal", "*");
    conf.set("yarn.resourcemanager.webapp.spnego-keytab-file", serviceKeytab.getPath());
    conf.set("yarn.nodemanager.webapp.spnego-principal", "*");
    conf.set("yarn.nodemanager.webapp.spnego-keytab-file", serviceKeytab.getPath());
    // Containers find the realm as on a node with /etc/krb5.conf: Java (skein's AM) by
    // java.security.krb5.conf, MIT Kerberos (the Primus AM's gssapi) by KRB5_CONFIG.
    conf.set("yarn.nodemanager.admin-env", "MALLOC_ARENA_MAX=$MALLOC_ARENA_MAX,KRB5_CONFIG=" + krb5conf.getPath()
        + ",JAVA_TOOL_OPTIONS=-Djava.security.krb5.conf=" + krb5conf.getPath());
    // SPNEGO on the ResourceManager's and NodeManagers' web servers (REST included).
    conf.set("hadoop.http.filter.initializers", "org.apache.hadoop.security.AuthenticationFilterInitializer");
  }

  private void common(Configuration conf) {
    conf.set("hadoop.security.authentication", "kerberos");
    conf.setBoolean("hadoop.security.authorization", true);
    // The HTTP authentication filter's settings (the NameNode's WebHDFS filter reads them too).
    conf.set("hadoop.http.authentication.type", "kerberos");
    conf.set("hadoop.http.authentication.simple.anonymous.allowed", "false");
    conf.set("hadoop.http.authentication.kerberos.principal", "*");
    conf.set("hadoop.http.authentication.kerberos.keytab", serviceKeytab.getPath());
  }

  /** What clients need besides the addresses. */
  void clientCore(Map<String, String> core) {
    core.put("hadoop.security.authentication", "kerberos");
    core.put("hadoop.security.authorization", "true");
  }

  void clientHdfs(Map<String, String> hdfs) {
    hdfs.put("dfs.namenode.kerberos.principal", service);
    hdfs.put("dfs.datanode.kerberos.principal", service);
    hdfs.put("dfs.web.authentication.kerberos.principal", "HTTP/localhost@" + realm);
    hdfs.put("dfs.block.access.token.enable", "true");
  }

  void clientYarn(Map<String, String> yarn) {
    yarn.put("yarn.resourcemanager.principal", service);
    yarn.put("yarn.nodemanager.principal", service);
  }

  void ready(Map<String, String> info) {
    info.put("kerberos", "true");
    info.put("realm", realm);
    info.put("kdc", "127.0.0.1:" + kdc.getPort());
    info.put("krb5_conf", krb5conf.getPath());
    info.put("principal", user);
    info.put("keytab", userKeytab.getPath());
    info.put("service_principal", service);
  }

  void stop() {
    kdc.stop();
  }
}
