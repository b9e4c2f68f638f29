// Unwraps a data key with the JDK's own RSA-OAEP, SHA3-512 for both the OAEP hash and MGF1
// (what BouncyCastle's "RSA/NONE/OAEPWithSHA3-512AndMGF1Padding" means), so the test can
// check the engine's wrap against an implementation other than the one that made it.
// Usage: java OaepUnwrap <PKCS#8 private key PEM file> <base64 wrapped key>; prints base64.
import java.nio.file.Files;
import java.nio.file.Paths;
import java.security.KeyFactory;
import java.security.PrivateKey;
import java.security.spec.MGF1ParameterSpec;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.Base64;
import javax.crypto.Cipher;
import javax.crypto.spec.OAEPParameterSpec;
import javax.crypto.spec.PSource;

public class OaepUnwrap {
    public static void main(String[] args) throws Exception {
        String pem = new String(Files.readAllBytes(Paths.get(args[0])))
            .replaceAll("-----[A-Z ]+-----", "").replaceAll("\\s", "");
        PrivateKey key = KeyFactory.getInstance("RSA")
            .generatePrivate(new PKCS8EncodedKeySpec(Base64.getDecoder().decode(pem)));
        Cipher cipher = Cipher.getInstance("RSA/ECB/OAEPPadding");
        cipher.init(Cipher.DECRYPT_MODE, key, new OAEPParameterSpec(
            "SHA3-512", "MGF1", new MGF1ParameterSpec("SHA3-512"), PSource.PSpecified.DEFAULT));
        byte[] plain = cipher.doFinal(Base64.getDecoder().decode(args[1]));
        System.out.println(Base64.getEncoder().encodeToString(plain));
    }
}
