// TrustCheck connects to an https URL the way a Java app does, trusting only the
// truststore given by -Djavax.net.ssl.trustStore (and its type and password), and
// prints HANDSHAKE-OK when the server's certificate verified against it.
public class TrustCheck {
    public static void main(String[] args) throws Exception {
        var conn = (javax.net.ssl.HttpsURLConnection) new java.net.URI(args[0]).toURL().openConnection();
        conn.setConnectTimeout(10000);
        conn.setReadTimeout(10000);
        int status = conn.getResponseCode();
        System.out.println("HANDSHAKE-OK status " + status + " peer " + conn.getPeerPrincipal());
    }
}
